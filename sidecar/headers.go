package sidecar

import (
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"

	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc/codes"
)

// headerBlock is what the tap keeps of one decoded header block.
type headerBlock struct {
	streamID  uint32
	endStream bool
	// path is the request's :path (the gRPC method) and timeout its
	// grpc-timeout; the rest is what grpc-go's client reads of a reply
	// (operateHeaders): grpc-status (badStatus when one is not a number),
	// grpc-message, :status, whether a gRPC content-type came, the
	// grpc-encoding, and whether a "-bin" metadata field is not base64.
	path, timeout              string
	status                     codes.Code
	hasStatus, badStatus       bool
	message                    string
	hasMessage                 bool
	httpStatus                 string
	hasHTTPStatus, grpcContent bool
	encoding                   string
	badMetadata                bool
}

func (h *headerBlock) keep(f hpack.HeaderField) {
	switch f.Name {
	case ":path":
		h.path = f.Value
	case "grpc-timeout":
		h.timeout = f.Value
	case "grpc-status":
		if v, err := strconv.ParseInt(f.Value, 10, 32); err == nil {
			h.status, h.hasStatus = codes.Code(uint32(v)), true
		} else {
			h.badStatus = true
		}
	case "grpc-message":
		h.message, h.hasMessage = f.Value, true
	case ":status":
		h.httpStatus, h.hasHTTPStatus = f.Value, true
	case "content-type":
		h.grpcContent = h.grpcContent || validGRPCContentType(f.Value)
	case "grpc-encoding":
		h.encoding = f.Value
	default:
		h.badMetadata = h.badMetadata || !validMetadata(f.Name, f.Value)
	}
}

// headerDecoder mirrors the peer's HPACK encoder of one direction. Its table
// has the encoder's size: HTTP/2's default 4096 bytes, then whatever the
// encoder's size updates name, up to what the encoder is allowed (the
// SETTINGS_HEADER_TABLE_SIZE the other side advertised). A larger table would
// still decode correctly but keep entries the encoder evicted long ago, and
// x/net's table copies its entries on every eviction: a connection's calls
// would get slower with its age.
type headerDecoder struct {
	dec     *hpack.Decoder
	block   headerBlock
	allowed atomic.Uint32 // set by the other direction's SETTINGS
}

func newHeaderDecoder() *headerDecoder {
	h := &headerDecoder{}
	h.dec = hpack.NewDecoder(defaultHeaderTableBytes, h.block.keep)
	h.dec.SetMaxStringLength(maxHeaderBlockBytes)
	h.allowed.Store(headerTableFloorBytes)
	return h
}

// allow records the table size the other side advertised.
func (h *headerDecoder) allow(size uint32) {
	h.allowed.Store(max(min(size, maxHeaderTableBytes), headerTableFloorBytes))
}

var errTableTooLarge = errors.New("HPACK dynamic table size update larger than the peer allowed")

// decode decodes one complete header block into h.block. The leading dynamic
// table size updates are applied here rather than by x/net's decoder, which
// refuses the second of the pair RFC 7541 4.2 allows (smallest, then final
// size) once the table holds entries.
func (h *headerDecoder) decode(streamID uint32, endStream bool, p []byte) error {
	h.block = headerBlock{streamID: streamID, endStream: endStream}
	p, err := h.applySizeUpdates(p)
	if err != nil {
		return err
	}
	if _, err := h.dec.Write(p); err != nil {
		return err
	}
	return h.dec.Close()
}

func (h *headerDecoder) applySizeUpdates(p []byte) ([]byte, error) {
	allowed := h.allowed.Load()
	h.dec.SetAllowedMaxDynamicTableSize(allowed)
	for len(p) > 0 && p[0]&0xe0 == 0x20 { // 001xxxxx: dynamic table size update
		size, n, err := hpackInt(p, 5)
		if err != nil {
			return nil, err
		}
		if size > uint64(allowed) {
			return nil, fmt.Errorf("%w: %d > %d", errTableTooLarge, size, allowed)
		}
		h.dec.SetMaxDynamicTableSize(uint32(size))
		p = p[n:]
	}
	return p, nil
}

// hpackInt reads an RFC 7541 5.1 integer with an n-bit prefix from p and
// returns it with the bytes it took.
func hpackInt(p []byte, n uint) (uint64, int, error) {
	limit := uint64(1)<<n - 1
	v := uint64(p[0]) & limit
	if v < limit {
		return v, 1, nil
	}
	for i, shift := 1, uint(0); i < len(p) && shift <= 28; i, shift = i+1, shift+7 {
		v += uint64(p[i]&0x7f) << shift
		if p[i]&0x80 == 0 {
			return v, i + 1, nil
		}
	}
	return 0, 0, errors.New("HPACK integer truncated or too large")
}
