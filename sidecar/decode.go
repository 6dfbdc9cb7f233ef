package sidecar

import (
	"bytes"
	"fmt"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// ClaimParameterPrefix is what the parameters an Observation keeps start
// with: the external-provisioner's csi.storage.k8s.io/pvc/name and
// .../pvc/namespace (--extra-create-metadata). The rest of a StorageClass's
// parameters is never read, so never copied.
const ClaimParameterPrefix = "csi.storage.k8s.io/pvc/"

// The tap decodes the few fields it promises straight from the wire with
// protowire instead of unmarshalling whole messages: a request's parameters
// map and secrets are skipped without a single allocation, so a CreateVolume
// of 1 MiB costs a scan, not a million-byte object graph. Field numbers come
// from the spec's descriptors, checked when the package loads.

// decodeCall fills o's Request and Response from the first gRPC message of
// each half of a call whose method the tap decodes (nil resp: no reply).
// Once the request is decoded, its secrets are zeroed in place, so the
// buffer needs no wiping as a whole; wiped tells whether that happened.
func decodeCall(o *Observation, req, resp []byte) (wiped bool, err error) {
	dec, ok := decoders[o.Method]
	if !ok {
		return false, nil
	}
	if err := dec.request(o, req); err != nil {
		return false, fmt.Errorf("request: %w", err)
	}
	wiped = wipeField(req, dec.secrets) == nil
	if resp == nil {
		return wiped, nil
	}
	if err := dec.response(o, resp); err != nil {
		return wiped, fmt.Errorf("response: %w", err)
	}
	return wiped, nil
}

type decoder struct {
	request, response func(o *Observation, b []byte) error
	secrets           protowire.Number // the request's secrets field
	// keep lists the request's top-level fields request reads, claim its
	// parameters map (0: none): what a fieldFilter keeps.
	keep  map[protowire.Number]bool
	claim protowire.Number
}

func fieldSet(nums ...protowire.Number) map[protowire.Number]bool {
	set := map[protowire.Number]bool{}
	for _, n := range nums {
		set[n] = true
	}
	return set
}

// wipeField zeroes the bytes of every occurrence of field num in message b.
func wipeField(b []byte, num protowire.Number) error {
	return fields(b, func(f wireField) error {
		if f.num == num {
			clear(f.b)
		}
		return nil
	})
}

var decoders = map[string]decoder{
	MethodCreateVolume: {decodeCreateVolumeRequest, decodeCreateVolumeResponse, field(&csi.CreateVolumeRequest{}, "secrets"),
		fieldSet(cvName, cvCapacity, cvCapability, cvSource), cvParameters},
	MethodDeleteVolume: {decodeDeleteVolumeRequest, checkMessage, field(&csi.DeleteVolumeRequest{}, "secrets"),
		fieldSet(dvVolumeID), 0},
	MethodControllerExpandVolume: {decodeExpandRequest, decodeExpandResponse, field(&csi.ControllerExpandVolumeRequest{}, "secrets"),
		fieldSet(evVolumeID, evCapacity, evCapability), 0},
	MethodCreateSnapshot: {decodeCreateSnapshotRequest, decodeCreateSnapshotResponse, field(&csi.CreateSnapshotRequest{}, "secrets"),
		fieldSet(csSourceVolume, csName), csParameters},
	MethodDeleteSnapshot: {decodeDeleteSnapshotRequest, checkMessage, field(&csi.DeleteSnapshotRequest{}, "secrets"),
		fieldSet(dsSnapshotID), 0},
}

// decodes tells whether the tap decodes a method's messages (and so buffers them).
func decodes(method string) bool {
	_, ok := decoders[method]
	return ok
}

// field is the number of a field of a spec message, by name.
func field(m proto.Message, name string) protowire.Number {
	f := m.ProtoReflect().Descriptor().Fields().ByName(protoreflect.Name(name))
	if f == nil {
		panic(fmt.Sprintf("CSI spec: %s has no field %s", m.ProtoReflect().Descriptor().FullName(), name))
	}
	return f.Number()
}

// wireField is one field of a message on the wire: b for length-delimited
// fields, u for varints.
type wireField struct {
	num protowire.Number
	typ protowire.Type
	b   []byte
	u   uint64
}

// fields calls visit for each field of message b, in wire order; a later
// occurrence of a field overrides an earlier one, as protobuf merges.
func fields(b []byte, visit func(f wireField) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		f := wireField{num: num, typ: typ}
		switch typ {
		case protowire.BytesType:
			f.b, n = protowire.ConsumeBytes(b)
		case protowire.VarintType:
			f.u, n = protowire.ConsumeVarint(b)
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		if err := visit(f); err != nil {
			return err
		}
	}
	return nil
}

// A field whose wire type is not its declared one is an unknown field to
// protobuf, skipped without error; the accessors below do the same.

// setText stores a length-delimited field in dst.
func (f wireField) setText(dst *string) {
	if f.typ == protowire.BytesType {
		*dst = string(f.b)
	}
}

// setInt stores a varint field (int64, bool) in dst.
func (f wireField) setInt(dst *int64) {
	if f.typ == protowire.VarintType {
		*dst = int64(f.u)
	}
}

// sub returns an embedded message's bytes, ok false when f is not one.
func (f wireField) sub() ([]byte, bool) {
	return f.b, f.typ == protowire.BytesType
}

// checkMessage decodes a reply the tap reports nothing of (DeleteVolume's,
// DeleteSnapshot's), only to tell a well-formed one from garbage.
func checkMessage(_ *Observation, b []byte) error {
	return fields(b, func(wireField) error { return nil })
}

var (
	capRequired = field(&csi.CapacityRange{}, "required_bytes")
	capLimit    = field(&csi.CapacityRange{}, "limit_bytes")
)

// decodeCapacity merges a CapacityRange into r.
func decodeCapacity(r *Request, b []byte) error {
	return fields(b, func(f wireField) error {
		switch f.num {
		case capRequired:
			f.setInt(&r.RequiredBytes)
		case capLimit:
			f.setInt(&r.LimitBytes)
		}
		return nil
	})
}

var (
	capabilityBlock = field(&csi.VolumeCapability{}, "block")
	capabilityMount = field(&csi.VolumeCapability{}, "mount")
)

var (
	entryKey   = protowire.Number(1) // map entries: key = 1, value = 2 (protobuf encoding spec)
	entryValue = protowire.Number(2)
	claimParam = []byte(ClaimParameterPrefix)
)

// decodeClaimParameter adds one parameters map entry to params when its key
// names the claim; other entries are skipped without being copied.
func decodeClaimParameter(params *map[string]string, b []byte) error {
	if key, value, ok := simpleEntry(b); ok {
		if bytes.HasPrefix(key, claimParam) {
			setParameter(params, key, value)
		}
		return nil
	}
	var key, value []byte
	err := fields(b, func(f wireField) error {
		if f.typ != protowire.BytesType {
			return nil
		}
		switch f.num {
		case entryKey:
			key = f.b
		case entryValue:
			value = f.b
		}
		return nil
	})
	if err != nil || !bytes.HasPrefix(key, claimParam) {
		return err
	}
	setParameter(params, key, value)
	return nil
}

// keyTag and valueTag start a map entry's fields as every encoder writes them.
var (
	keyTag   = protowire.AppendTag(nil, entryKey, protowire.BytesType)[0]
	valueTag = protowire.AppendTag(nil, entryValue, protowire.BytesType)[0]
)

// simpleEntry splits a map entry written as encoders write it, key then
// value and nothing else, without a general walk: most of a 1 MiB request
// is parameters the tap skips. Anything else is left to the general walk.
func simpleEntry(b []byte) (key, value []byte, ok bool) {
	if len(b) == 0 || b[0] != keyTag {
		return nil, nil, false
	}
	key, n := protowire.ConsumeBytes(b[1:])
	if n < 0 {
		return nil, nil, false
	}
	rest := b[1+n:]
	if len(rest) == 0 {
		return key, nil, true
	}
	if rest[0] != valueTag {
		return nil, nil, false
	}
	value, n = protowire.ConsumeBytes(rest[1:])
	return key, value, n == len(rest)-1
}

func setParameter(params *map[string]string, key, value []byte) {
	if *params == nil {
		*params = make(map[string]string, len(claimKeys))
	}
	(*params)[parameterKey(key)] = string(value)
}

// claimKeys are the claim parameters csi-provisioner adds
// (--extra-create-metadata): their keys are taken from here, so decoding a
// request allocates only their values.
var claimKeys = [...]string{ClaimParameterPrefix + "name", ClaimParameterPrefix + "namespace"}

func parameterKey(key []byte) string {
	for _, k := range claimKeys {
		if string(key) == k {
			return k
		}
	}
	return string(key)
}

var (
	sourceSnapshot = field(&csi.VolumeContentSource{}, "snapshot")
	sourceVolume   = field(&csi.VolumeContentSource{}, "volume")
	snapshotID     = field(&csi.VolumeContentSource_SnapshotSource{}, "snapshot_id")
	volumeID       = field(&csi.VolumeContentSource_VolumeSource{}, "volume_id")
)

// decodeContentSource sets the volume or snapshot a VolumeContentSource
// names; a later member of the oneof replaces an earlier one.
func decodeContentSource(volume, snapshot *string, b []byte) error {
	return fields(b, func(f wireField) error {
		m, ok := f.sub()
		switch {
		case !ok:
		case f.num == sourceSnapshot:
			*volume = ""
			return decodeString(snapshot, m, snapshotID)
		case f.num == sourceVolume:
			*snapshot = ""
			return decodeString(volume, m, volumeID)
		}
		return nil
	})
}

// decodeString reads string field num of message b into dst.
func decodeString(dst *string, b []byte, num protowire.Number) error {
	return fields(b, func(f wireField) error {
		if f.num == num {
			f.setText(dst)
		}
		return nil
	})
}
