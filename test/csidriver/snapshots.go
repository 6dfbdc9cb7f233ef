package csidriver

import (
	"context"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"
	"k8s.io/klog/v2"
)

// CreateSnapshot copies a volume's data into a snapshot in the volume's pool.
// Name reuse with the same source returns the existing snapshot.
func (c *controllerServer) CreateSnapshot(ctx context.Context, req *csi.CreateSnapshotRequest) (*csi.CreateSnapshotResponse, error) {
	name, source := req.GetName(), req.GetSourceVolumeId()
	switch {
	case name == "":
		return nil, status.Error(codes.InvalidArgument, "name is required")
	case source == "":
		return nil, status.Error(codes.InvalidArgument, "source_volume_id is required")
	case !validID(name):
		return nil, status.Errorf(codes.InvalidArgument,
			"name %q: want at most 128 letters, digits, '.', '_', '-', starting with a letter or digit", name)
	}
	want, existing, err := c.d.planSnapshot(name, source, req.GetParameters())
	if err != nil || existing != nil {
		return csiSnapshotResponse(existing), err
	}
	s := c.d.store
	method, err := cloneData(s.volumeData(source), s.snapshotData(name), 0)
	if err == nil {
		if err = writeJSON(s.snapshotMeta(name), want); err != nil {
			_ = removeFiles(s.snapshotMeta(name), s.snapshotData(name))
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.release(snapshotKey(name), volumeKey(source))
	if err != nil {
		return nil, status.Errorf(codes.Internal, "create snapshot %s: %v", name, err)
	}
	s.snapshots[name] = &want
	klog.V(2).InfoS("snapshot created", "snapshot", name, "source", source, "bytes", want.SizeBytes, "data", method)
	return csiSnapshotResponse(&want), nil
}

// planSnapshot checks name reuse and the source under the lock and reserves
// the space; the caller must release the reservation.
func (d *Driver) planSnapshot(name, source string, params map[string]string) (snapshot, *snapshot, error) {
	s := d.store
	s.mu.Lock()
	defer s.mu.Unlock()
	if why := s.inUse(snapshotKey(name)); why != "" {
		return snapshot{}, nil, status.Error(codes.Aborted, why)
	}
	if sn, ok := s.snapshots[name]; ok {
		if sn.SourceVolumeID != source {
			return snapshot{}, nil, status.Errorf(codes.AlreadyExists, "snapshot %s exists with source volume %s", name, sn.SourceVolumeID)
		}
		return snapshot{}, sn, nil
	}
	v, ok := s.volumes[source]
	if !ok {
		return snapshot{}, nil, status.Errorf(codes.NotFound, "source volume %s does not exist", source)
	}
	if free := d.pools[v.Pool].CapacityBytes - s.used(v.Pool); v.CapacityBytes > free {
		return snapshot{}, nil, status.Errorf(codes.ResourceExhausted, "pool %s has %d bytes free, snapshot needs %d", v.Pool, free, v.CapacityBytes)
	}
	s.pending[snapshotKey(name)] = reservation{pool: v.Pool, bytes: v.CapacityBytes}
	s.busy[volumeKey(source)]++
	return snapshot{ID: name, SourceVolumeID: source, Pool: v.Pool, SizeBytes: v.CapacityBytes,
		Parameters: params, CreatedAt: time.Now().UTC()}, nil, nil
}

func csiSnapshotResponse(sn *snapshot) *csi.CreateSnapshotResponse {
	if sn == nil {
		return nil
	}
	return &csi.CreateSnapshotResponse{Snapshot: csiSnapshot(sn)}
}

func csiSnapshot(sn *snapshot) *csi.Snapshot {
	return &csi.Snapshot{
		SnapshotId:     sn.ID,
		SourceVolumeId: sn.SourceVolumeID,
		SizeBytes:      sn.SizeBytes,
		CreationTime:   timestamppb.New(sn.CreatedAt),
		ReadyToUse:     true,
	}
}

// DeleteSnapshot removes a snapshot; an unknown snapshot is already deleted.
func (c *controllerServer) DeleteSnapshot(ctx context.Context, req *csi.DeleteSnapshotRequest) (*csi.DeleteSnapshotResponse, error) {
	id := req.GetSnapshotId()
	if id == "" {
		return nil, status.Error(codes.InvalidArgument, "snapshot_id is required")
	}
	s := c.d.store
	s.mu.Lock()
	defer s.mu.Unlock()
	if why := s.inUse(snapshotKey(id)); why != "" {
		return nil, status.Error(codes.Aborted, why)
	}
	if _, ok := s.snapshots[id]; !ok {
		return &csi.DeleteSnapshotResponse{}, nil
	}
	if err := removeFiles(s.snapshotMeta(id), s.snapshotData(id)); err != nil {
		return nil, status.Errorf(codes.Internal, "delete snapshot %s: %v", id, err)
	}
	delete(s.snapshots, id)
	return &csi.DeleteSnapshotResponse{}, nil
}

// ListSnapshots lists snapshots, filtered by id or source volume, in pages.
func (c *controllerServer) ListSnapshots(ctx context.Context, req *csi.ListSnapshotsRequest) (*csi.ListSnapshotsResponse, error) {
	s := c.d.store
	s.mu.Lock()
	defer s.mu.Unlock()
	var ids []string
	for _, id := range sortedIDs(s.snapshots) {
		sn := s.snapshots[id]
		if (req.GetSnapshotId() == "" || id == req.GetSnapshotId()) &&
			(req.GetSourceVolumeId() == "" || sn.SourceVolumeID == req.GetSourceVolumeId()) {
			ids = append(ids, id)
		}
	}
	page, next, err := paginate(ids, req.GetStartingToken(), req.GetMaxEntries(), "snapshots:")
	if err != nil {
		return nil, err
	}
	out := &csi.ListSnapshotsResponse{NextToken: next}
	for _, id := range page {
		out.Entries = append(out.Entries, &csi.ListSnapshotsResponse_Entry{Snapshot: csiSnapshot(s.snapshots[id])})
	}
	return out, nil
}

func (c *controllerServer) GetSnapshot(ctx context.Context, req *csi.GetSnapshotRequest) (*csi.GetSnapshotResponse, error) {
	if req.GetSnapshotId() == "" {
		return nil, status.Error(codes.InvalidArgument, "snapshot_id is required")
	}
	s := c.d.store
	s.mu.Lock()
	defer s.mu.Unlock()
	sn, ok := s.snapshots[req.GetSnapshotId()]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "snapshot %s does not exist", req.GetSnapshotId())
	}
	return &csi.GetSnapshotResponse{Snapshot: csiSnapshot(sn)}, nil
}
