package sidecar

import (
	"encoding/binary"
	"errors"
	"fmt"
	"maps"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/protobuf/proto"
)

// errCompressed marks a message the tap cannot read because gRPC compressed it.
var errCompressed = errors.New("compressed gRPC message")

var unmarshal = proto.UnmarshalOptions{DiscardUnknown: true}

// firstMessage returns the first gRPC length-prefixed message of a stream's
// bytes, or nil when there is none (e.g. a failed call has no response).
func firstMessage(b []byte) ([]byte, error) {
	if len(b) == 0 {
		return nil, nil
	}
	if len(b) < 5 {
		return nil, fmt.Errorf("truncated gRPC message prefix (%d bytes)", len(b))
	}
	if b[0] == 1 {
		return nil, errCompressed
	}
	if b[0] != 0 {
		return nil, fmt.Errorf("invalid gRPC compressed flag %d", b[0])
	}
	n := binary.BigEndian.Uint32(b[1:5])
	if uint64(len(b)-5) < uint64(n) {
		return nil, fmt.Errorf("gRPC message of %d bytes truncated at %d", n, len(b)-5)
	}
	return b[5 : 5+n], nil
}

// decodeCall fills o's Request and Response from the raw stream bytes of the
// methods clones are made of. Requests are decoded into the spec's types and
// only the listed fields are copied out, so secrets never leave this function.
func decodeCall(o *Observation, req, resp []byte) error {
	dec, ok := decoders[o.Method]
	if !ok {
		return nil
	}
	reqMsg, err := firstMessage(req)
	if err != nil {
		return fmt.Errorf("request: %w", err)
	}
	respMsg, err := firstMessage(resp)
	if err != nil {
		return fmt.Errorf("response: %w", err)
	}
	return dec(o, reqMsg, respMsg)
}

type decoder func(o *Observation, req, resp []byte) error

var decoders = map[string]decoder{
	MethodCreateVolume:           decodeAs(fillCreateVolume),
	MethodDeleteVolume:           decodeAs(fillDeleteVolume),
	MethodControllerExpandVolume: decodeAs(fillExpandVolume),
	MethodCreateSnapshot:         decodeAs(fillCreateSnapshot),
	MethodDeleteSnapshot:         decodeAs(fillDeleteSnapshot),
}

// message is a pointer to a generated protobuf struct.
type message[T any] interface {
	*T
	proto.Message
}

// decodeAs builds the decoder of one method: it unmarshals the request and,
// when the call has one, the response (nil otherwise), and lets fill copy
// out the promised fields. The messages, secrets included, die with it.
func decodeAs[Req, Resp any, PReq message[Req], PResp message[Resp]](fill func(*Observation, PReq, PResp)) decoder {
	return func(o *Observation, reqBytes, respBytes []byte) error {
		req := PReq(new(Req))
		if err := unmarshal.Unmarshal(reqBytes, req); err != nil {
			return fmt.Errorf("request: %w", err)
		}
		var resp PResp
		if respBytes != nil {
			resp = PResp(new(Resp))
			if err := unmarshal.Unmarshal(respBytes, resp); err != nil {
				return fmt.Errorf("response: %w", err)
			}
		}
		fill(o, req, resp)
		return nil
	}
}

func fillCapacity(r *Request, c *csi.CapacityRange) {
	r.RequiredBytes, r.LimitBytes = c.GetRequiredBytes(), c.GetLimitBytes()
}

func fillCreateVolume(o *Observation, req *csi.CreateVolumeRequest, resp *csi.CreateVolumeResponse) {
	o.Request.Name = req.GetName()
	o.Request.Parameters = maps.Clone(req.GetParameters())
	fillCapacity(&o.Request, req.GetCapacityRange())
	o.Request.SourceVolumeID = req.GetVolumeContentSource().GetVolume().GetVolumeId()
	o.Request.SourceSnapshotID = req.GetVolumeContentSource().GetSnapshot().GetSnapshotId()
	for _, c := range req.GetVolumeCapabilities() {
		o.Request.Block = o.Request.Block || c.GetBlock() != nil
	}
	if resp != nil {
		v := resp.GetVolume()
		o.Response.VolumeID, o.Response.CapacityBytes = v.GetVolumeId(), v.GetCapacityBytes()
		o.Response.SourceVolumeID = v.GetContentSource().GetVolume().GetVolumeId()
		o.Response.SourceSnapshotID = v.GetContentSource().GetSnapshot().GetSnapshotId()
	}
}

func fillDeleteVolume(o *Observation, req *csi.DeleteVolumeRequest, _ *csi.DeleteVolumeResponse) {
	o.Request.VolumeID = req.GetVolumeId()
}

func fillExpandVolume(o *Observation, req *csi.ControllerExpandVolumeRequest, resp *csi.ControllerExpandVolumeResponse) {
	o.Request.VolumeID = req.GetVolumeId()
	fillCapacity(&o.Request, req.GetCapacityRange())
	o.Request.Block = req.GetVolumeCapability().GetBlock() != nil
	if resp != nil {
		o.Response.VolumeID = req.GetVolumeId()
		o.Response.CapacityBytes = resp.GetCapacityBytes()
		o.Response.NodeExpansionRequired = resp.GetNodeExpansionRequired()
	}
}

func fillCreateSnapshot(o *Observation, req *csi.CreateSnapshotRequest, resp *csi.CreateSnapshotResponse) {
	o.Request.Name = req.GetName()
	o.Request.Parameters = maps.Clone(req.GetParameters())
	o.Request.SourceVolumeID = req.GetSourceVolumeId()
	if resp != nil {
		s := resp.GetSnapshot()
		o.Response.SnapshotID, o.Response.SnapshotSizeBytes = s.GetSnapshotId(), s.GetSizeBytes()
		o.Response.SourceVolumeID = s.GetSourceVolumeId()
	}
}

func fillDeleteSnapshot(o *Observation, req *csi.DeleteSnapshotRequest, _ *csi.DeleteSnapshotResponse) {
	o.Request.SnapshotID = req.GetSnapshotId()
}
