// Package sidecar is the data path of csi-clone-sidecar: a byte-for-byte relay
// between the kubernetes-csi sidecars and the CSI driver's socket, plus a passive
// tap that decodes the traffic into Observations. It imports nothing from
// Kubernetes (it logs through log/slog, which the binary routes to klog);
// whoever wants the observations implements Observer.
package sidecar

import (
	"time"

	"google.golang.org/grpc/codes"
)

// Full gRPC method names the tap decodes field by field. Every other method is
// still observed (method, status, timing) but without request/response fields.
const (
	MethodCreateVolume           = "/csi.v1.Controller/CreateVolume"
	MethodDeleteVolume           = "/csi.v1.Controller/DeleteVolume"
	MethodControllerExpandVolume = "/csi.v1.Controller/ControllerExpandVolume"
	MethodCreateSnapshot         = "/csi.v1.Controller/CreateSnapshot"
	MethodDeleteSnapshot         = "/csi.v1.Controller/DeleteSnapshot"
)

// Observation is one finished CSI call as the tap saw it on the wire. It never
// carries a request's secrets: the decoder drops them before building it.
type Observation struct {
	// Method is the full gRPC method, e.g. "/csi.v1.Controller/CreateVolume".
	Method string
	// Start is when the request headers crossed the relay, End when the final
	// status (trailers or a stream reset) did.
	Start, End time.Time
	// Code and Message are the status a grpc-go client reports for the
	// call (grpcstatus.go): mostly the driver's grpc-status and
	// grpc-message; for a reset stream, a broken reply, a cancel at the
	// deadline or a closed connection, grpc-go's own code.
	Code    codes.Code
	Message string

	Request  Request
	Response Response
}

// Request holds the fields of the decoded request that matter to clones.
type Request struct {
	// Name is CreateVolume's / CreateSnapshot's name.
	Name string
	// Parameters are CreateVolume's / CreateSnapshot's parameters (the
	// StorageClass parameters plus csi.storage.k8s.io/pvc/name etc.).
	Parameters map[string]string
	// RequiredBytes and LimitBytes are the capacity range (CreateVolume,
	// ControllerExpandVolume).
	RequiredBytes, LimitBytes int64
	// SourceVolumeID is CreateVolume's volume content source, or
	// CreateSnapshot's source_volume_id.
	SourceVolumeID string
	// SourceSnapshotID is CreateVolume's snapshot content source.
	SourceSnapshotID string
	// VolumeID is the volume a DeleteVolume / ControllerExpandVolume acts on.
	VolumeID string
	// SnapshotID is the snapshot a DeleteSnapshot acts on.
	SnapshotID string
	// Block is true when CreateVolume / ControllerExpandVolume asked for a
	// block volume capability.
	Block bool
}

// Response holds the fields of the decoded response that matter to clones.
type Response struct {
	// VolumeID and CapacityBytes come from CreateVolume's volume, or are the
	// new capacity of a ControllerExpandVolume.
	VolumeID      string
	CapacityBytes int64
	// SourceVolumeID / SourceSnapshotID is the content source the driver
	// reports for the volume it created.
	SourceVolumeID   string
	SourceSnapshotID string
	// SnapshotID and SnapshotSizeBytes come from CreateSnapshot.
	SnapshotID        string
	SnapshotSizeBytes int64
	// NodeExpansionRequired comes from ControllerExpandVolume.
	NodeExpansionRequired bool
}

// Observer receives finished calls. Observe is called from the tap's delivery
// goroutine, never from the relay's path; a slow Observer only causes
// observations to be dropped (and counted), never a stalled CSI call.
type Observer interface {
	Observe(Observation)
}

// MethodSelector may be implemented by an Observer that needs the calls of
// some methods only: the tap then neither buffers nor queues the others (a
// queued call wakes the tap's delivery goroutine, which a small call's
// latency feels); their timings still reach the Recorder.
type MethodSelector interface {
	Observes(method string) bool
}

// DecodedMethod tells whether the tap decodes method's fields (the five
// Method* constants): what an Observer of clone evidence selects.
func DecodedMethod(method string) bool { return decodes(method) }

// observes returns o's choice of methods: its MethodSelector, or all.
func observes(o Observer) func(string) bool {
	if s, ok := o.(MethodSelector); ok {
		return s.Observes
	}
	return func(string) bool { return true }
}

// ObserverFunc adapts a function to Observer.
type ObserverFunc func(Observation)

// Observe calls f(o).
func (f ObserverFunc) Observe(o Observation) { f(o) }
