package csidriver

import (
	"context"
	"path"
	"sync"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/kubernetes-csi/csi-lib-utils/protosanitizer"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"
)

// logCall logs every call once it is answered: method, the request's key
// fields, the status and the duration. Fields are picked one by one, never
// the whole request, so secrets cannot leak; at -v=5 the full request and
// response are logged with secrets stripped by csi-lib-utils' protosanitizer.
func (d *Driver) logCall(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	start := time.Now()
	method := path.Base(info.FullMethod)
	if klog.V(5).Enabled() {
		klog.V(5).InfoS("CSI request", "method", method, "request", protosanitizer.StripSecrets(req))
	}
	resp, err := handler(ctx, req)
	st := status.Convert(err)
	kv := append([]any{"method", method}, requestFields(req)...)
	if err == nil {
		kv = append(kv, responseFields(resp)...)
	}
	kv = append(kv, "code", st.Code().String(), "duration", time.Since(start).Round(time.Microsecond))
	if err != nil {
		kv = append(kv, "message", st.Message())
	}
	klog.InfoS("CSI call", kv...)
	if err == nil && klog.V(5).Enabled() {
		klog.V(5).InfoS("CSI response", "method", method, "response", protosanitizer.StripSecrets(resp))
	}
	return resp, err
}

// requestFields are the fields worth a log line per request type. Secrets
// are deliberately absent.
func requestFields(req any) []any {
	switch r := req.(type) {
	case *csi.CreateVolumeRequest:
		return []any{"name", r.GetName(), "parameters", r.GetParameters(),
			"requiredBytes", r.GetCapacityRange().GetRequiredBytes(), "limitBytes", r.GetCapacityRange().GetLimitBytes(),
			"sourceVolume", r.GetVolumeContentSource().GetVolume().GetVolumeId(),
			"sourceSnapshot", r.GetVolumeContentSource().GetSnapshot().GetSnapshotId()}
	case *csi.DeleteVolumeRequest:
		return []any{"volume", r.GetVolumeId()}
	case *csi.ControllerExpandVolumeRequest:
		return []any{"volume", r.GetVolumeId(), "requiredBytes", r.GetCapacityRange().GetRequiredBytes(),
			"limitBytes", r.GetCapacityRange().GetLimitBytes()}
	case *csi.CreateSnapshotRequest:
		return []any{"name", r.GetName(), "sourceVolume", r.GetSourceVolumeId()}
	case *csi.DeleteSnapshotRequest:
		return []any{"snapshot", r.GetSnapshotId()}
	case *csi.GetSnapshotRequest:
		return []any{"snapshot", r.GetSnapshotId()}
	case *csi.ListSnapshotsRequest:
		return []any{"snapshot", r.GetSnapshotId(), "sourceVolume", r.GetSourceVolumeId(),
			"maxEntries", r.GetMaxEntries(), "startingToken", r.GetStartingToken()}
	case *csi.ListVolumesRequest:
		return []any{"maxEntries", r.GetMaxEntries(), "startingToken", r.GetStartingToken()}
	case *csi.ControllerPublishVolumeRequest:
		return []any{"volume", r.GetVolumeId(), "node", r.GetNodeId(), "readonly", r.GetReadonly()}
	case *csi.ControllerUnpublishVolumeRequest:
		return []any{"volume", r.GetVolumeId(), "node", r.GetNodeId()}
	case *csi.ValidateVolumeCapabilitiesRequest:
		return []any{"volume", r.GetVolumeId()}
	case *csi.ControllerGetVolumeRequest:
		return []any{"volume", r.GetVolumeId()}
	case *csi.GetCapacityRequest:
		return []any{"parameters", r.GetParameters()}
	case *csi.NodeUnpublishVolumeRequest:
		return []any{"volume", r.GetVolumeId()}
	}
	return nil
}

func responseFields(resp any) []any {
	switch r := resp.(type) {
	case *csi.CreateVolumeResponse:
		return []any{"volume", r.GetVolume().GetVolumeId(), "capacityBytes", r.GetVolume().GetCapacityBytes()}
	case *csi.ControllerExpandVolumeResponse:
		return []any{"capacityBytes", r.GetCapacityBytes(), "nodeExpansionRequired", r.GetNodeExpansionRequired()}
	case *csi.CreateSnapshotResponse:
		return []any{"snapshot", r.GetSnapshot().GetSnapshotId(), "sizeBytes", r.GetSnapshot().GetSizeBytes()}
	case *csi.GetCapacityResponse:
		return []any{"availableCapacity", r.GetAvailableCapacity()}
	case *csi.ListVolumesResponse:
		return []any{"entries", len(r.GetEntries()), "nextToken", r.GetNextToken()}
	case *csi.ListSnapshotsResponse:
		return []any{"entries", len(r.GetEntries()), "nextToken", r.GetNextToken()}
	}
	return nil
}

// faultInjector delays or fails calls by method and counts finished calls
// for ExitAfter.
type faultInjector struct {
	faults  Faults
	onLimit func(n int)
	mu      sync.Mutex
	calls   int
	exiting bool
	// clonesFailed counts the clones answered with FailClones.Code.
	clonesFailed int
}

func newFaultInjector(f Faults, onLimit func(int)) *faultInjector {
	return &faultInjector{faults: f, onLimit: onLimit}
}

func (f *faultInjector) intercept(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	defer f.count()
	method := path.Base(info.FullMethod)
	if delay := f.faults.Delay[method]; delay > 0 {
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, status.FromContextError(contextEnd(ctx)).Err()
		}
	}
	if code, ok := f.faults.Fail[method]; ok {
		return nil, status.Errorf(code, "injected fault: --fail=%s=%s", method, code)
	}
	if f.failClone(req) {
		return nil, status.Errorf(f.faults.FailClones.Code, "injected fault: --fail-clones=%s", f.faults.FailClones.String())
	}
	return handler(ctx, req)
}

// failClone reports whether req is a clone that --fail-clones still fails.
func (f *faultInjector) failClone(req any) bool {
	cv, ok := req.(*csi.CreateVolumeRequest)
	if !ok || cv.GetVolumeContentSource() == nil || f.faults.FailClones.Times == 0 {
		return false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.clonesFailed == f.faults.FailClones.Times {
		return false
	}
	f.clonesFailed++
	return true
}

// count runs when a call has been answered. Reaching the limit stops the
// driver in the background, so this call's response still goes out.
func (f *faultInjector) count() {
	if f.faults.ExitAfter <= 0 {
		return
	}
	f.mu.Lock()
	f.calls++
	reached := f.calls >= f.faults.ExitAfter && !f.exiting
	if reached {
		f.exiting = true
	}
	n := f.calls
	f.mu.Unlock()
	if reached {
		go f.onLimit(n)
	}
}
