// Package sanity holds the csi-sanity comparison of the test driver reached
// directly and through the sidecar's relay; this file normalises what the
// driver received and what the tap observed into comparable call records.
package sanity

import (
	"context"
	"fmt"
	"sync"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	"github.com/cozystack/csi-clone-sidecar/sidecar"
)

// Call is one decoded call reduced to the fields the tap promises.
type Call struct {
	Method, Name, VolumeID, SnapshotID, SourceVolume, SourceSnapshot string
	RequiredBytes                                                    int64
	Code                                                             string
	RespVolumeID, RespSnapshotID                                     string
	RespCapacity                                                     int64
}

// String prints every field; the conversion drops the method set, so
// fmt does not call String again.
func (c Call) String() string {
	type fields Call
	return fmt.Sprintf("%+v", fields(c))
}

// Received records, from inside the driver, the calls of the methods the
// tap decodes, and whether any of them carried secrets.
type Received struct {
	mu          sync.Mutex
	calls       []Call
	withSecrets int
}

// Interceptor is installed in the driver (csidriver.Config.Interceptor).
func (r *Received) Interceptor(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	resp, err := h(ctx, req)
	c, secrets, ok := fromDriver(info.FullMethod, req, resp)
	if ok {
		c.Code = status.Code(err).String()
		r.mu.Lock()
		r.calls = append(r.calls, c)
		if secrets {
			r.withSecrets++
		}
		r.mu.Unlock()
	}
	return resp, err
}

// Calls returns what was recorded and how many calls carried secrets.
func (r *Received) Calls() ([]Call, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Call(nil), r.calls...), r.withSecrets
}

func fromDriver(method string, req, resp any) (Call, bool, bool) {
	c := Call{Method: method}
	switch q := req.(type) {
	case *csi.CreateVolumeRequest:
		c.Name, c.RequiredBytes = q.GetName(), q.GetCapacityRange().GetRequiredBytes()
		c.SourceVolume = q.GetVolumeContentSource().GetVolume().GetVolumeId()
		c.SourceSnapshot = q.GetVolumeContentSource().GetSnapshot().GetSnapshotId()
		if r, ok := resp.(*csi.CreateVolumeResponse); ok {
			c.RespVolumeID, c.RespCapacity = r.GetVolume().GetVolumeId(), r.GetVolume().GetCapacityBytes()
		}
		return c, len(q.GetSecrets()) > 0, true
	case *csi.DeleteVolumeRequest:
		c.VolumeID = q.GetVolumeId()
		return c, len(q.GetSecrets()) > 0, true
	case *csi.ControllerExpandVolumeRequest:
		c.VolumeID, c.RequiredBytes = q.GetVolumeId(), q.GetCapacityRange().GetRequiredBytes()
		if r, ok := resp.(*csi.ControllerExpandVolumeResponse); ok {
			c.RespVolumeID, c.RespCapacity = q.GetVolumeId(), r.GetCapacityBytes()
		}
		return c, len(q.GetSecrets()) > 0, true
	case *csi.CreateSnapshotRequest:
		c.Name, c.SourceVolume = q.GetName(), q.GetSourceVolumeId()
		if r, ok := resp.(*csi.CreateSnapshotResponse); ok {
			c.RespSnapshotID = r.GetSnapshot().GetSnapshotId()
		}
		return c, len(q.GetSecrets()) > 0, true
	case *csi.DeleteSnapshotRequest:
		c.SnapshotID = q.GetSnapshotId()
		return c, len(q.GetSecrets()) > 0, true
	}
	return c, false, false
}

// FromObservation reduces a tap observation the same way; ok is false for
// methods the tap does not decode.
func FromObservation(o sidecar.Observation) (Call, bool) {
	switch o.Method {
	case sidecar.MethodCreateVolume, sidecar.MethodDeleteVolume, sidecar.MethodControllerExpandVolume,
		sidecar.MethodCreateSnapshot, sidecar.MethodDeleteSnapshot:
	default:
		return Call{}, false
	}
	q, r := o.Request, o.Response
	c := Call{Method: o.Method, Name: q.Name, VolumeID: q.VolumeID, SnapshotID: q.SnapshotID,
		RequiredBytes: q.RequiredBytes, Code: o.Code.String(),
		RespVolumeID: r.VolumeID, RespSnapshotID: r.SnapshotID, RespCapacity: r.CapacityBytes}
	if o.Method == sidecar.MethodCreateSnapshot {
		c.SourceVolume = q.SourceVolumeID
	} else {
		c.SourceVolume, c.SourceSnapshot = q.SourceVolumeID, q.SourceSnapshotID
	}
	return c, true
}
