package sidecar

import (
	"maps"
	"reflect"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/protobuf/proto"
)

// The reference the wire decoder is judged against: protobuf's own
// Unmarshal into the spec's types, then the promised fields read with the
// generated getters.
type reference struct {
	req, resp func() proto.Message
	fill      func(o *Observation, req, resp proto.Message)
}

var references = map[string]reference{
	MethodCreateVolume: {func() proto.Message { return &csi.CreateVolumeRequest{} }, func() proto.Message { return &csi.CreateVolumeResponse{} },
		func(o *Observation, rq, rs proto.Message) {
			req := rq.(*csi.CreateVolumeRequest)
			o.Request.Name = req.GetName()
			o.Request.Parameters = claimParameters(req.GetParameters())
			o.Request.RequiredBytes, o.Request.LimitBytes = req.GetCapacityRange().GetRequiredBytes(), req.GetCapacityRange().GetLimitBytes()
			o.Request.SourceVolumeID = req.GetVolumeContentSource().GetVolume().GetVolumeId()
			o.Request.SourceSnapshotID = req.GetVolumeContentSource().GetSnapshot().GetSnapshotId()
			for _, c := range req.GetVolumeCapabilities() {
				o.Request.Block = o.Request.Block || c.GetBlock() != nil
			}
			if resp, ok := rs.(*csi.CreateVolumeResponse); ok {
				v := resp.GetVolume()
				o.Response.VolumeID, o.Response.CapacityBytes = v.GetVolumeId(), v.GetCapacityBytes()
				o.Response.SourceVolumeID = v.GetContentSource().GetVolume().GetVolumeId()
				o.Response.SourceSnapshotID = v.GetContentSource().GetSnapshot().GetSnapshotId()
			}
		}},
	MethodControllerExpandVolume: {func() proto.Message { return &csi.ControllerExpandVolumeRequest{} }, func() proto.Message { return &csi.ControllerExpandVolumeResponse{} },
		func(o *Observation, rq, rs proto.Message) {
			req := rq.(*csi.ControllerExpandVolumeRequest)
			o.Request.VolumeID = req.GetVolumeId()
			o.Request.RequiredBytes, o.Request.LimitBytes = req.GetCapacityRange().GetRequiredBytes(), req.GetCapacityRange().GetLimitBytes()
			o.Request.Block = req.GetVolumeCapability().GetBlock() != nil
			if resp, ok := rs.(*csi.ControllerExpandVolumeResponse); ok {
				o.Response.VolumeID, o.Response.CapacityBytes = req.GetVolumeId(), resp.GetCapacityBytes()
				o.Response.NodeExpansionRequired = resp.GetNodeExpansionRequired()
			}
		}},
	MethodCreateSnapshot: {func() proto.Message { return &csi.CreateSnapshotRequest{} }, func() proto.Message { return &csi.CreateSnapshotResponse{} },
		func(o *Observation, rq, rs proto.Message) {
			req := rq.(*csi.CreateSnapshotRequest)
			o.Request.Name, o.Request.SourceVolumeID = req.GetName(), req.GetSourceVolumeId()
			o.Request.Parameters = claimParameters(req.GetParameters())
			if resp, ok := rs.(*csi.CreateSnapshotResponse); ok {
				s := resp.GetSnapshot()
				o.Response.SnapshotID, o.Response.SnapshotSizeBytes, o.Response.SourceVolumeID = s.GetSnapshotId(), s.GetSizeBytes(), s.GetSourceVolumeId()
			}
		}},
	MethodDeleteVolume: {func() proto.Message { return &csi.DeleteVolumeRequest{} }, func() proto.Message { return &csi.DeleteVolumeResponse{} },
		func(o *Observation, rq, _ proto.Message) {
			o.Request.VolumeID = rq.(*csi.DeleteVolumeRequest).GetVolumeId()
		}},
	MethodDeleteSnapshot: {func() proto.Message { return &csi.DeleteSnapshotRequest{} }, func() proto.Message { return &csi.DeleteSnapshotResponse{} },
		func(o *Observation, rq, _ proto.Message) {
			o.Request.SnapshotID = rq.(*csi.DeleteSnapshotRequest).GetSnapshotId()
		}},
}

func claimParameters(all map[string]string) map[string]string {
	kept := maps.Collect(func(yield func(string, string) bool) {
		for k, v := range all {
			if strings.HasPrefix(k, ClaimParameterPrefix) && !yield(k, v) {
				return
			}
		}
	})
	if len(kept) == 0 {
		return nil
	}
	return kept
}

// FuzzDecode checks the wire decoder's answer, not only that it survives:
// for any request and reply bytes protobuf itself accepts, the fields the
// tap reports equal those protobuf's Unmarshal yields.
func FuzzDecode(f *testing.F) {
	seed := func(m proto.Message) []byte { b, _ := proto.Marshal(m); return b }
	golden := &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Volume{Volume: &csi.VolumeContentSource_VolumeSource{VolumeId: "golden"}}}
	f.Add(uint8(0), seed(&csi.CreateVolumeRequest{Name: "pvc-1", Parameters: map[string]string{ClaimParameterPrefix + "name": "tmp-pvc-1", "x": "y"},
		Secrets: map[string]string{"k": "s"}, VolumeContentSource: golden, CapacityRange: &csi.CapacityRange{RequiredBytes: 1 << 30},
		VolumeCapabilities: []*csi.VolumeCapability{{AccessType: &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}}}}}),
		seed(&csi.CreateVolumeResponse{Volume: &csi.Volume{VolumeId: "v", CapacityBytes: 5, ContentSource: golden}}))
	f.Add(uint8(1), seed(&csi.ControllerExpandVolumeRequest{VolumeId: "v", CapacityRange: &csi.CapacityRange{RequiredBytes: 9}}),
		seed(&csi.ControllerExpandVolumeResponse{CapacityBytes: 9, NodeExpansionRequired: true}))
	f.Add(uint8(2), seed(&csi.CreateSnapshotRequest{Name: "s", SourceVolumeId: "v"}), seed(&csi.CreateSnapshotResponse{Snapshot: &csi.Snapshot{SnapshotId: "s", SizeBytes: 3}}))
	methods := []string{MethodCreateVolume, MethodControllerExpandVolume, MethodCreateSnapshot, MethodDeleteVolume, MethodDeleteSnapshot}
	f.Fuzz(func(t *testing.T, which uint8, req, resp []byte) {
		method := methods[int(which)%len(methods)]
		ref := references[method]
		rq, rs := ref.req(), ref.resp()
		if proto.Unmarshal(req, rq) != nil || proto.Unmarshal(resp, rs) != nil {
			return // the wire decoder may be more lenient than protobuf
		}
		want := Observation{Method: method}
		ref.fill(&want, rq, rs)
		got := Observation{Method: method}
		if _, err := decodeCall(&got, req, resp); err != nil {
			t.Fatalf("%s: protobuf accepts the messages, the tap does not: %v", method, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%s:\n tap      %+v\n protobuf %+v", method, got, want)
		}
		// In small pieces the filter stages every field's header; in one
		// piece it takes whole fields straight from the read.
		for _, n := range []int{int(which)/len(methods) + 1, len(req) + 1} {
			filtered := filterInChunks(t, method, req, n)
			got = Observation{Method: method}
			if _, err := decodeCall(&got, filtered, resp); err != nil || !reflect.DeepEqual(got, want) {
				t.Fatalf("%s, request filtered as it streams in pieces of %d bytes:\n tap      %+v (%v)\n protobuf %+v", method, n, got, err, want)
			}
		}
	})
}

// filterInChunks runs a request through its method's fieldFilter in pieces
// of n bytes, as DATA frames would bring it.
func filterInChunks(t *testing.T, method string, req []byte, n int) []byte {
	f := &fieldFilter{}
	f.init(decoders[method], len(req), &account{share: &share{}}, newBudget(maxBufferedBytes))
	for b := req; len(b) > 0; b = b[min(n, len(b)):] {
		f.write(b[:min(n, len(b))])
	}
	out, err := f.finish()
	if err != nil {
		t.Fatalf("%s: the filter refused a request protobuf accepts: %v", method, err)
	}
	return out
}
