package csidriver

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"
)

const (
	// sizeAlign is the allocation unit: sizes are rounded up to it.
	sizeAlign int64 = 4096
	// defaultVolumeSize is used when a request gives no capacity at all.
	defaultVolumeSize int64 = 1 << 30
)

// createPlan is a validated CreateVolume, with its source resolved and its
// pool space reserved.
type createPlan struct {
	vol        volume
	sourcePath string // data file to clone, "" for a blank volume
	sourceKey  string // store key of the source, "" for a blank volume
	sourcePool string
}

type controllerServer struct {
	csi.UnimplementedControllerServer
	d *Driver
}

// CreateVolume creates a blank volume, a clone of a volume or a restore of a
// snapshot. Name reuse with the same request returns the existing volume.
func (c *controllerServer) CreateVolume(ctx context.Context, req *csi.CreateVolumeRequest) (*csi.CreateVolumeResponse, error) {
	d := c.d
	want, required, limit, err := d.createRequest(req)
	if err != nil {
		return nil, err
	}
	plan, existing, err := d.planCreate(want, required, limit)
	if err != nil {
		return nil, err
	}
	if existing != nil {
		return &csi.CreateVolumeResponse{Volume: d.csiVolume(existing)}, nil
	}
	if plan == nil { // a clone into a node-local pool from another pool
		return nil, d.refuseCrossPool(ctx, want)
	}
	method, err := d.materialize(plan)
	d.store.mu.Lock()
	defer d.store.mu.Unlock()
	d.store.release(volumeKey(want.ID), plan.sourceKey)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "create volume %s: %v", want.ID, err)
	}
	v := plan.vol
	d.store.volumes[v.ID] = &v
	klog.V(2).InfoS("volume created", "volume", v.ID, "pool", v.Pool, "bytes", v.CapacityBytes, "data", method)
	return &csi.CreateVolumeResponse{Volume: d.csiVolume(&v)}, nil
}

// createRequest checks a CreateVolume request and turns it into the volume it
// asks for (size not yet decided).
func (d *Driver) createRequest(req *csi.CreateVolumeRequest) (volume, int64, int64, error) {
	if req.GetName() == "" {
		return volume{}, 0, 0, status.Error(codes.InvalidArgument, "name is required")
	}
	if !validID(req.GetName()) {
		return volume{}, 0, 0, status.Errorf(codes.InvalidArgument,
			"name %q: want at most 128 letters, digits, '.', '_', '-', starting with a letter or digit", req.GetName())
	}
	block, err := checkCapabilities(req.GetVolumeCapabilities())
	if err != nil {
		return volume{}, 0, 0, err
	}
	required, limit, err := capacityRange(req.GetCapacityRange())
	if err != nil {
		return volume{}, 0, 0, err
	}
	pool, err := d.pool(req.GetParameters())
	if err != nil {
		return volume{}, 0, 0, status.Error(codes.InvalidArgument, err.Error())
	}
	v := volume{ID: req.GetName(), Pool: pool.Name, Block: block, Parameters: req.GetParameters()}
	if src := req.GetVolumeContentSource(); src != nil {
		v.SourceVolumeID = src.GetVolume().GetVolumeId()
		v.SourceSnapshotID = src.GetSnapshot().GetSnapshotId()
		if v.SourceVolumeID == "" && v.SourceSnapshotID == "" {
			return volume{}, 0, 0, status.Error(codes.InvalidArgument, "volume_content_source names neither a volume nor a snapshot")
		}
	}
	return v, required, limit, nil
}

// planCreate decides, under the store lock, between "already exists",
// "refused (cross-pool into node-local)" (nil plan, nil volume) and a plan
// whose space is reserved. The caller must release a returned plan.
func (d *Driver) planCreate(want volume, required, limit int64) (*createPlan, *volume, error) {
	s := d.store
	s.mu.Lock()
	defer s.mu.Unlock()
	if why := s.inUse(volumeKey(want.ID)); why != "" {
		return nil, nil, status.Error(codes.Aborted, why)
	}
	if v, ok := s.volumes[want.ID]; ok {
		if reason := incompatible(v, want, required, limit); reason != "" {
			return nil, nil, status.Errorf(codes.AlreadyExists, "volume %s exists with %s", want.ID, reason)
		}
		return nil, v, nil
	}
	plan := &createPlan{vol: want}
	var srcSize int64
	switch {
	case want.SourceVolumeID != "":
		src, ok := s.volumes[want.SourceVolumeID]
		if !ok || !validID(want.SourceVolumeID) {
			return nil, nil, status.Errorf(codes.NotFound, "source volume %s does not exist", want.SourceVolumeID)
		}
		plan.sourcePath, plan.sourceKey, plan.sourcePool, srcSize = s.volumeData(src.ID), volumeKey(src.ID), src.Pool, src.CapacityBytes
	case want.SourceSnapshotID != "":
		src, ok := s.snapshots[want.SourceSnapshotID]
		if !ok || !validID(want.SourceSnapshotID) {
			return nil, nil, status.Errorf(codes.NotFound, "source snapshot %s does not exist", want.SourceSnapshotID)
		}
		plan.sourcePath, plan.sourceKey, plan.sourcePool, srcSize = s.snapshotData(src.ID), snapshotKey(src.ID), src.Pool, src.SizeBytes
	}
	size, err := chooseSize(required, limit, srcSize)
	if err != nil {
		return nil, nil, err
	}
	if plan.sourceKey != "" && plan.sourcePool != want.Pool && d.pools[want.Pool].NodeLocal {
		return nil, nil, nil
	}
	if free := d.pools[want.Pool].CapacityBytes - s.used(want.Pool); size > free {
		return nil, nil, status.Errorf(codes.OutOfRange, "pool %s has %d bytes free, %d requested", want.Pool, free, size)
	}
	plan.vol.CapacityBytes, plan.vol.CreatedAt = size, time.Now().UTC()
	s.pending[volumeKey(want.ID)] = reservation{pool: want.Pool, bytes: size}
	if plan.sourceKey != "" {
		s.busy[plan.sourceKey]++
	}
	return plan, nil, nil
}

// materialize writes the data file and then the record (the commit point).
func (d *Driver) materialize(p *createPlan) (copyMethod, error) {
	data := d.store.volumeData(p.vol.ID)
	method := copyBlank
	var err error
	if p.sourcePath == "" {
		err = createBlank(data, p.vol.CapacityBytes)
	} else {
		method, err = cloneData(p.sourcePath, data, p.vol.CapacityBytes)
	}
	if err == nil {
		err = writeJSON(d.store.volumeMeta(p.vol.ID), p.vol)
		if err != nil {
			_ = removeFiles(d.store.volumeMeta(p.vol.ID), data)
		}
	}
	return method, err
}

// refuseCrossPool is what LINSTOR does with a clone into a node-local pool
// from a source that pool does not hold: it never completes (hang), or, when
// configured, fails at once.
func (d *Driver) refuseCrossPool(ctx context.Context, want volume) error {
	src := "volume " + want.SourceVolumeID
	if want.SourceSnapshotID != "" {
		src = "snapshot " + want.SourceSnapshotID
	}
	msg := fmt.Sprintf("cannot clone %s into node-local pool %s: the pool does not hold the source", src, want.Pool)
	if d.cfg.NodeLocalClone == CloneFail {
		klog.ErrorS(nil, "refusing clone", "volume", want.ID, "reason", msg)
		return status.Error(codes.InvalidArgument, msg)
	}
	klog.InfoS("clone into node-local pool waits for a source it will never get", "volume", want.ID, "source", src, "pool", want.Pool)
	<-ctx.Done()
	err := contextEnd(ctx)
	klog.ErrorS(err, "failed to create volume", "volume", want.ID, "source", src, "pool", want.Pool)
	return status.FromContextError(fmt.Errorf("%s: %w", msg, err)).Err()
}

// contextEnd says why a call's context ended. When the caller's deadline
// passes, the gRPC client resets the stream a moment before the server's own
// copy of the deadline fires, so the server sees "canceled"; a cancel at the
// deadline is reported as what it is, an expired deadline.
func contextEnd(ctx context.Context) error {
	err := ctx.Err()
	if dl, ok := ctx.Deadline(); ok && errors.Is(err, context.Canceled) && time.Until(dl) < deadlineSlack {
		return context.DeadlineExceeded
	}
	return err
}

// deadlineSlack covers the transit time between the client's deadline and
// the server's.
const deadlineSlack = 250 * time.Millisecond

// DeleteVolume removes a volume; an unknown volume is already deleted.
func (c *controllerServer) DeleteVolume(ctx context.Context, req *csi.DeleteVolumeRequest) (*csi.DeleteVolumeResponse, error) {
	id := req.GetVolumeId()
	if id == "" {
		return nil, status.Error(codes.InvalidArgument, "volume_id is required")
	}
	s := c.d.store
	s.mu.Lock()
	defer s.mu.Unlock()
	if why := s.inUse(volumeKey(id)); why != "" {
		return nil, status.Error(codes.Aborted, why)
	}
	v, ok := s.volumes[id]
	if !ok {
		return &csi.DeleteVolumeResponse{}, nil
	}
	if len(v.Published) > 0 {
		return nil, status.Errorf(codes.FailedPrecondition, "volume %s is still published to %v", id, sortedIDs(v.Published))
	}
	if err := removeFiles(s.volumeMeta(id), s.volumeData(id)); err != nil {
		return nil, status.Errorf(codes.Internal, "delete volume %s: %v", id, err)
	}
	delete(s.volumes, id)
	return &csi.DeleteVolumeResponse{}, nil
}

// ControllerExpandVolume grows a volume. Filesystem volumes then need the
// node to grow the filesystem; block volumes are done.
func (c *controllerServer) ControllerExpandVolume(ctx context.Context, req *csi.ControllerExpandVolumeRequest) (*csi.ControllerExpandVolumeResponse, error) {
	id := req.GetVolumeId()
	if id == "" {
		return nil, status.Error(codes.InvalidArgument, "volume_id is required")
	}
	if req.GetCapacityRange() == nil {
		return nil, status.Error(codes.InvalidArgument, "capacity_range is required")
	}
	required, limit, err := capacityRange(req.GetCapacityRange())
	if err != nil {
		return nil, err
	}
	s := c.d.store
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.volumes[id]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "volume %s does not exist", id)
	}
	size, err := chooseSize(required, limit, v.CapacityBytes)
	if err != nil {
		return nil, err
	}
	if grow := size - v.CapacityBytes; grow > 0 {
		if free := c.d.pools[v.Pool].CapacityBytes - s.used(v.Pool); grow > free {
			return nil, status.Errorf(codes.OutOfRange, "pool %s has %d bytes free, %d more requested", v.Pool, free, grow)
		}
		if err := c.d.grow(v, size); err != nil {
			return nil, status.Errorf(codes.Internal, "expand volume %s: %v", id, err)
		}
	}
	block := v.Block
	if vc := req.GetVolumeCapability(); vc != nil {
		block = vc.GetBlock() != nil
	}
	return &csi.ControllerExpandVolumeResponse{CapacityBytes: v.CapacityBytes, NodeExpansionRequired: !block}, nil
}

// grow resizes the data file and the record together. Caller holds mu.
func (d *Driver) grow(v *volume, size int64) error {
	if err := resizeData(d.store.volumeData(v.ID), size); err != nil {
		return err
	}
	updated := *v
	updated.CapacityBytes = size
	if err := writeJSON(d.store.volumeMeta(v.ID), updated); err != nil {
		return err
	}
	*v = updated
	return nil
}

// chooseSize picks the size for a request given the minimum it may have (a
// clone source's size, or a volume's current size). Sizes are rounded up to
// sizeAlign; a limit below what is needed is OutOfRange.
func chooseSize(required, limit, minimum int64) (int64, error) {
	size := roundUp(required)
	if required == 0 {
		size = defaultVolumeSize
		if minimum > 0 {
			size = minimum
		}
		if limit > 0 && size > limit {
			size = limit / sizeAlign * sizeAlign
		}
	}
	size = max(size, minimum)
	if limit > 0 && size > limit {
		return 0, status.Errorf(codes.OutOfRange, "capacity: need %d bytes (required %d, source/current %d, aligned to %d), limit is %d",
			size, required, minimum, sizeAlign, limit)
	}
	if size <= 0 {
		return 0, status.Errorf(codes.OutOfRange, "capacity: limit %d is below the %d-byte allocation unit", limit, sizeAlign)
	}
	return size, nil
}

func roundUp(n int64) int64 { return (n + sizeAlign - 1) / sizeAlign * sizeAlign }

func capacityRange(cr *csi.CapacityRange) (required, limit int64, err error) {
	required, limit = cr.GetRequiredBytes(), cr.GetLimitBytes()
	if required < 0 || limit < 0 {
		return 0, 0, status.Error(codes.InvalidArgument, "capacity_range: bytes must not be negative")
	}
	if limit > 0 && required > limit {
		return 0, 0, status.Errorf(codes.InvalidArgument, "capacity_range: required_bytes %d exceeds limit_bytes %d", required, limit)
	}
	return required, limit, nil
}

// incompatible says how an existing volume differs from a repeated
// CreateVolume of the same name, or "" when the request is satisfied by it.
func incompatible(have *volume, want volume, required, limit int64) string {
	switch {
	case have.Pool != want.Pool:
		return "pool " + have.Pool
	case have.Block != want.Block:
		return fmt.Sprintf("a different access type (block=%v)", have.Block)
	case have.SourceVolumeID != want.SourceVolumeID || have.SourceSnapshotID != want.SourceSnapshotID:
		return fmt.Sprintf("a different content source (volume %q, snapshot %q)", have.SourceVolumeID, have.SourceSnapshotID)
	case !maps.Equal(have.Parameters, want.Parameters):
		return "different parameters"
	case have.CapacityBytes < required || (limit > 0 && have.CapacityBytes > limit):
		return fmt.Sprintf("capacity %d bytes, outside [%d, %d]", have.CapacityBytes, required, limit)
	}
	return ""
}

func (d *Driver) csiVolume(v *volume) *csi.Volume {
	out := &csi.Volume{
		VolumeId:      v.ID,
		CapacityBytes: v.CapacityBytes,
		VolumeContext: map[string]string{PoolParameter: v.Pool},
	}
	switch {
	case v.SourceVolumeID != "":
		out.ContentSource = &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Volume{
			Volume: &csi.VolumeContentSource_VolumeSource{VolumeId: v.SourceVolumeID}}}
	case v.SourceSnapshotID != "":
		out.ContentSource = &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Snapshot{
			Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: v.SourceSnapshotID}}}
	}
	return out
}
