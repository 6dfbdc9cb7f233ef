package sidecar

import (
	"bytes"
	"errors"
	"io"

	"google.golang.org/protobuf/encoding/protowire"
)

// fieldFilter keeps, of a request message streaming in, only the top-level
// fields its method's decoder reads, and of its parameters map only the
// entries whose key names the claim: the message it builds decodes to the
// same Observation as the whole one, but a 1 MiB request of StorageClass
// parameters costs a scan of its field headers, not a copy, and its secrets
// are never copied at all. Anything it does not expect (a group, a tag that
// does not parse) makes it copy the rest verbatim, which is only slower.
type fieldFilter struct {
	keep  map[protowire.Number]bool // fields copied whole
	claim protowire.Number          // the parameters map: entries filtered
	out   []byte

	hdr  [20]byte // a field's tag and length (two varints) as they arrive
	nh   int
	mode filterMode
	left int // bytes of the current field still to come
	// entryStart, entryBody and entryLen locate the parameters entry being
	// read: where its field starts in out, where its bytes start, how many.
	entryStart, entryBody, entryLen int

	// size is the message's; what out holds is reserved through acct, and
	// overBudget says the budget refused more (the message is given up).
	size       int
	acct       *account
	budget     *budget
	overBudget bool
}

type filterMode int

const (
	atHeader filterMode = iota
	copying
	skipping
	inEntry
	verbatim
)

// init sets f, whatever it held, to filter a message of size bytes; what it
// keeps is reserved through acct as it grows.
func (f *fieldFilter) init(dec decoder, size int, acct *account, b *budget) {
	*f = fieldFilter{keep: dec.keep, claim: dec.claim, size: size, acct: acct, budget: b}
	if f.acct.grow(b, int64(bufferSizes[0])) {
		f.out = getBuffer(bufferSizes[0])
	} else {
		f.overBudget = true
	}
}

// appended is f.out with p added. When it must grow, the bytes move to a
// pooled buffer of the next size and the old one goes back wiped: it held
// request bytes (secrets included, in verbatim mode), and a buffer of no
// pool size would be dropped unwiped.
// Growth is at least twice, at most to the message's size, and reserved
// from the budget; without it the filter keeps nothing more (overBudget).
func (f *fieldFilter) appended(p ...byte) []byte {
	need := len(f.out) + len(p)
	if f.overBudget {
		return f.out
	}
	if need > cap(f.out) {
		size := bufferSize(min(max(need, 2*cap(f.out)), max(f.size, need)))
		if !f.acct.grow(f.budget, int64(size-cap(f.out))) {
			f.overBudget = true
			return f.out
		}
		grown := append(getBuffer(size), f.out...)
		putBuffer(f.out, true)
		f.out = grown
	}
	return append(f.out, p...)
}

// write takes the next bytes of the message.
func (f *fieldFilter) write(p []byte) {
	for len(p) > 0 && !f.overBudget {
		switch f.mode {
		case atHeader:
			if rest, ok := f.wholeField(p); ok {
				p = rest
				continue
			}
			p = f.header(p)
		case copying, inEntry:
			k := min(f.left, len(p))
			f.out, f.left, p = f.appended(p[:k]...), f.left-k, p[k:]
			if f.mode == inEntry {
				f.decideEntry()
			}
			f.fieldDone()
		case skipping:
			k := min(f.left, len(p))
			f.left, p = f.left-k, p[k:]
			f.fieldDone()
		case verbatim:
			f.out, p = f.appended(p...), nil
		}
	}
}

// wholeField takes a length-delimited field that p holds entirely, from p
// itself: the usual case, a request read in few pieces, costs a look at
// each field's header and a copy of only what is kept. It takes nothing
// (ok false) when p holds less than the whole field, or a field of another
// type, and header then follows it byte by byte; both keep the same fields.
func (f *fieldFilter) wholeField(p []byte) (rest []byte, ok bool) {
	if f.nh > 0 {
		return p, false
	}
	num, typ, n := consumeTag(p)
	if n < 0 || typ != protowire.BytesType {
		return p, false
	}
	size, m := consumeVarint(p[n:])
	if m < 0 || size > uint64(len(p)-n-m) {
		return p, false
	}
	end := n + m + int(size)
	switch {
	case num == f.claim:
		if key, ok := simpleEntryKey(p[n+m : end]); ok && !bytes.HasPrefix(key, claimParam) {
			return p[end:], true
		}
		f.out = f.appended(p[:end]...)
	case f.keep[num]:
		f.out = f.appended(p[:end]...)
	}
	return p[end:], true
}

// simpleEntryKey is the key of a whole map entry of the simple shape, key
// then value (ok false for any other: such an entry is kept).
func simpleEntryKey(entry []byte) (key []byte, ok bool) {
	// The usual entry, key and value under 128 bytes each, read directly.
	if len(entry) >= 4 && entry[0] == keyTag && entry[1] < 0x80 {
		if k := 2 + int(entry[1]); k+2 <= len(entry) && entry[k] == valueTag && entry[k+1] < 0x80 {
			return entry[2:k], k+2+int(entry[k+1]) == len(entry)
		}
	}
	// entryHead's key bounds hold only for the simple shape (value >= 0).
	bounds, value, done := entryHead(entry, len(entry))
	if !done || value < 0 {
		return nil, false
	}
	return entry[bounds[0]:bounds[1]], true
}

// consumeTag and consumeVarint are protowire's, with a single-byte varint,
// the usual one, read inline.
func consumeTag(p []byte) (protowire.Number, protowire.Type, int) {
	if len(p) > 0 && p[0] < 0x80 && p[0]>>3 != 0 {
		return protowire.Number(p[0] >> 3), protowire.Type(p[0] & 7), 1
	}
	return protowire.ConsumeTag(p)
}

func consumeVarint(p []byte) (uint64, int) {
	if len(p) > 0 && p[0] < 0x80 {
		return uint64(p[0]), 1
	}
	return protowire.ConsumeVarint(p)
}

func (f *fieldFilter) fieldDone() {
	if f.left == 0 && f.mode != verbatim {
		f.mode = atHeader
	}
}

// header assembles the next field's tag (and length, or varint value) and
// chooses what to do with the field; it returns the rest of p.
func (f *fieldFilter) header(p []byte) []byte {
	had := f.nh
	f.nh += copy(f.hdr[f.nh:], p)
	num, typ, n := protowire.ConsumeTag(f.hdr[:f.nh])
	if n < 0 {
		return f.needMore(p, had, n)
	}
	var size uint64
	m := 0
	switch typ {
	case protowire.BytesType, protowire.VarintType:
		size, m = protowire.ConsumeVarint(f.hdr[n:f.nh])
		if m < 0 {
			return f.needMore(p, had, m)
		}
		if typ == protowire.VarintType {
			size = 0 // the value was the varint itself
		}
	case protowire.Fixed32Type:
		size = 4
	case protowire.Fixed64Type:
		size = 8
	default: // groups: not followed field by field
		return f.giveUp(p, had)
	}
	used := n + m
	f.start(num, typ, f.hdr[:used], size)
	f.nh = 0
	return p[used-had:]
}

// needMore keeps the header bytes when they are only incomplete, and gives
// up on following fields when they cannot parse at all.
func (f *fieldFilter) needMore(p []byte, had, code int) []byte {
	if errors.Is(protowire.ParseError(code), io.ErrUnexpectedEOF) && f.nh < len(f.hdr) {
		return p[len(p):] // all of p went into hdr
	}
	return f.giveUp(p, had)
}

// giveUp copies the rest of the message verbatim: the header bytes held,
// then what of p did not go into them (write appends it).
func (f *fieldFilter) giveUp(p []byte, had int) []byte {
	taken := f.nh - had
	f.mode, f.out = verbatim, f.appended(f.hdr[:f.nh]...)
	f.nh = 0
	return p[taken:]
}

// start begins a field whose header is h and whose value has size bytes.
func (f *fieldFilter) start(num protowire.Number, typ protowire.Type, h []byte, size uint64) {
	if size > uint64(maxMessageBytes) {
		f.mode, f.out = verbatim, f.appended(h...) // cannot fit the message: let decoding say so
		return
	}
	f.left = int(size)
	switch {
	case typ == protowire.BytesType && num == f.claim:
		f.mode, f.entryStart, f.entryLen = inEntry, len(f.out), int(size)
		f.out = f.appended(h...)
		f.entryBody = len(f.out)
	case typ == protowire.BytesType && f.keep[num]:
		f.mode, f.out = copying, f.appended(h...)
	default:
		f.mode = skipping
	}
	f.fieldDone()
}

// decideEntry drops a parameters entry as soon as its head shows a key that
// does not name the claim and nothing after its value; the rest of its value
// is then skipped uncopied. An entry of any other shape is kept whole.
func (f *fieldFilter) decideEntry() {
	entry := f.out[f.entryBody:]
	key, value, done := entryHead(entry, f.entryLen)
	if !done {
		if len(entry) > 4<<10 { // an odd entry: keep it
			f.mode = copying
		}
		return
	}
	if value < 0 || bytes.HasPrefix(entry[key[0]:key[1]], claimParam) {
		f.mode = copying
		return
	}
	f.out, f.mode = f.out[:f.entryStart], skipping
}

// entryHead reads the head of a map entry of length total: the key's bounds
// in entry, and the value's length, or value -1 when the entry is not the
// simple key-then-value shape. done is false while more bytes are needed.
func entryHead(entry []byte, total int) (key [2]int, value int, done bool) {
	if len(entry) == 0 {
		return key, 0, false
	}
	if entry[0] != keyTag {
		return key, -1, true
	}
	klen, n := protowire.ConsumeVarint(entry[1:])
	if n < 0 {
		return key, -1, len(entry) >= total
	}
	key = [2]int{1 + n, 1 + n + int(klen)}
	if klen > uint64(total) || key[1] > total {
		return key, -1, true
	}
	if key[1] == total {
		return key, 0, len(entry) >= total
	}
	if len(entry) <= key[1] {
		return key, 0, false
	}
	if entry[key[1]] != valueTag {
		return key, -1, true
	}
	vlen, m := protowire.ConsumeVarint(entry[key[1]+1:])
	if m < 0 {
		return key, -1, len(entry) >= total
	}
	if key[1]+1+m+int(vlen) != total {
		return key, -1, true
	}
	return key, int(vlen), true
}

var errFilterTruncated = errors.New("request ends inside a field")

// finish returns the filtered message, or an error when the message ended
// inside a field (it was malformed: protobuf would refuse it too).
func (f *fieldFilter) finish() ([]byte, error) {
	if f.mode != verbatim && (f.nh > 0 || f.mode != atHeader) {
		return nil, errFilterTruncated
	}
	return f.out, nil
}
