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
	MethodCreateVolume:           decodeCreateVolume,
	MethodDeleteVolume:           decodeDeleteVolume,
	MethodControllerExpandVolume: decodeExpandVolume,
	MethodCreateSnapshot:         decodeCreateSnapshot,
	MethodDeleteSnapshot:         decodeDeleteSnapshot,
}

// decodePair unmarshals the request and, when present, the response.
func decodePair(reqBytes, respBytes []byte, req, resp proto.Message) (hasResp bool, err error) {
	if err := unmarshal.Unmarshal(reqBytes, req); err != nil {
		return false, fmt.Errorf("request: %w", err)
	}
	if respBytes == nil {
		return false, nil
	}
	if err := unmarshal.Unmarshal(respBytes, resp); err != nil {
		return false, fmt.Errorf("response: %w", err)
	}
	return true, nil
}

func decodeCreateVolume(o *Observation, reqBytes, respBytes []byte) error {
	var req csi.CreateVolumeRequest
	var resp csi.CreateVolumeResponse
	hasResp, err := decodePair(reqBytes, respBytes, &req, &resp)
	req.Secrets = nil
	if err != nil {
		return err
	}
	o.Request.Name = req.GetName()
	o.Request.Parameters = maps.Clone(req.GetParameters())
	o.Request.RequiredBytes = req.GetCapacityRange().GetRequiredBytes()
	o.Request.LimitBytes = req.GetCapacityRange().GetLimitBytes()
	o.Request.SourceVolumeID = req.GetVolumeContentSource().GetVolume().GetVolumeId()
	o.Request.SourceSnapshotID = req.GetVolumeContentSource().GetSnapshot().GetSnapshotId()
	for _, c := range req.GetVolumeCapabilities() {
		o.Request.Block = o.Request.Block || c.GetBlock() != nil
	}
	if hasResp {
		v := resp.GetVolume()
		o.Response.VolumeID = v.GetVolumeId()
		o.Response.CapacityBytes = v.GetCapacityBytes()
		o.Response.SourceVolumeID = v.GetContentSource().GetVolume().GetVolumeId()
		o.Response.SourceSnapshotID = v.GetContentSource().GetSnapshot().GetSnapshotId()
	}
	return nil
}

func decodeDeleteVolume(o *Observation, reqBytes, respBytes []byte) error {
	var req csi.DeleteVolumeRequest
	_, err := decodePair(reqBytes, respBytes, &req, &csi.DeleteVolumeResponse{})
	req.Secrets = nil
	o.Request.VolumeID = req.GetVolumeId()
	return err
}

func decodeExpandVolume(o *Observation, reqBytes, respBytes []byte) error {
	var req csi.ControllerExpandVolumeRequest
	var resp csi.ControllerExpandVolumeResponse
	hasResp, err := decodePair(reqBytes, respBytes, &req, &resp)
	req.Secrets = nil
	if err != nil {
		return err
	}
	o.Request.VolumeID = req.GetVolumeId()
	o.Request.RequiredBytes = req.GetCapacityRange().GetRequiredBytes()
	o.Request.LimitBytes = req.GetCapacityRange().GetLimitBytes()
	o.Request.Block = req.GetVolumeCapability().GetBlock() != nil
	if hasResp {
		o.Response.VolumeID = req.GetVolumeId()
		o.Response.CapacityBytes = resp.GetCapacityBytes()
		o.Response.NodeExpansionRequired = resp.GetNodeExpansionRequired()
	}
	return nil
}

func decodeCreateSnapshot(o *Observation, reqBytes, respBytes []byte) error {
	var req csi.CreateSnapshotRequest
	var resp csi.CreateSnapshotResponse
	hasResp, err := decodePair(reqBytes, respBytes, &req, &resp)
	req.Secrets = nil
	if err != nil {
		return err
	}
	o.Request.Name = req.GetName()
	o.Request.Parameters = maps.Clone(req.GetParameters())
	o.Request.SourceVolumeID = req.GetSourceVolumeId()
	if hasResp {
		s := resp.GetSnapshot()
		o.Response.SnapshotID = s.GetSnapshotId()
		o.Response.SnapshotSizeBytes = s.GetSizeBytes()
		o.Response.SourceVolumeID = s.GetSourceVolumeId()
	}
	return nil
}

func decodeDeleteSnapshot(o *Observation, reqBytes, respBytes []byte) error {
	var req csi.DeleteSnapshotRequest
	_, err := decodePair(reqBytes, respBytes, &req, &csi.DeleteSnapshotResponse{})
	req.Secrets = nil
	o.Request.SnapshotID = req.GetSnapshotId()
	return err
}
