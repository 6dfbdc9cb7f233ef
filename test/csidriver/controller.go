package csidriver

import (
	"context"
	"maps"
	"sort"
	"strings"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// controllerCapabilities are those of LINSTOR's controller that this driver
// implements (LINSTOR also reports volume conditions and modify; not here).
var controllerCapabilities = []csi.ControllerServiceCapability_RPC_Type{
	csi.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME,
	csi.ControllerServiceCapability_RPC_PUBLISH_UNPUBLISH_VOLUME,
	csi.ControllerServiceCapability_RPC_PUBLISH_READONLY,
	csi.ControllerServiceCapability_RPC_LIST_VOLUMES,
	csi.ControllerServiceCapability_RPC_LIST_VOLUMES_PUBLISHED_NODES,
	csi.ControllerServiceCapability_RPC_GET_VOLUME,
	csi.ControllerServiceCapability_RPC_GET_CAPACITY,
	csi.ControllerServiceCapability_RPC_CREATE_DELETE_SNAPSHOT,
	csi.ControllerServiceCapability_RPC_LIST_SNAPSHOTS,
	csi.ControllerServiceCapability_RPC_GET_SNAPSHOT,
	csi.ControllerServiceCapability_RPC_CLONE_VOLUME,
	csi.ControllerServiceCapability_RPC_EXPAND_VOLUME,
}

func (c *controllerServer) ControllerGetCapabilities(context.Context, *csi.ControllerGetCapabilitiesRequest) (*csi.ControllerGetCapabilitiesResponse, error) {
	out := &csi.ControllerGetCapabilitiesResponse{}
	for _, t := range controllerCapabilities {
		out.Capabilities = append(out.Capabilities, &csi.ControllerServiceCapability{
			Type: &csi.ControllerServiceCapability_Rpc{Rpc: &csi.ControllerServiceCapability_RPC{Type: t}}})
	}
	return out, nil
}

// checkCapabilities validates CreateVolume's capabilities and says whether
// they ask for a block volume.
func checkCapabilities(caps []*csi.VolumeCapability) (bool, error) {
	if len(caps) == 0 {
		return false, status.Error(codes.InvalidArgument, "volume_capabilities are required")
	}
	var block, mount bool
	for _, vc := range caps {
		if why := capabilityProblem(vc); why != "" {
			return false, status.Error(codes.InvalidArgument, why)
		}
		block = block || vc.GetBlock() != nil
		mount = mount || vc.GetMount() != nil
	}
	if block && mount {
		return false, status.Error(codes.InvalidArgument, "volume_capabilities mix block and mount access types")
	}
	return block, nil
}

// capabilityProblem says why one capability is unsupported, or "". Like
// LINSTOR, filesystem volumes cannot be written from several nodes.
func capabilityProblem(vc *csi.VolumeCapability) string {
	mode := vc.GetAccessMode().GetMode()
	if mode == csi.VolumeCapability_AccessMode_UNKNOWN {
		return "volume capability: access_mode is required"
	}
	switch {
	case vc.GetBlock() != nil:
		return ""
	case vc.GetMount() != nil:
		switch fs := vc.GetMount().GetFsType(); fs {
		case "", "ext4", "xfs":
		default:
			return "volume capability: fs_type " + fs + " is not supported (ext4, xfs)"
		}
		if mode == csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER ||
			mode == csi.VolumeCapability_AccessMode_MULTI_NODE_SINGLE_WRITER {
			return "volume capability: " + mode.String() + " is only supported for block volumes"
		}
		return ""
	}
	return "volume capability: access_type (block or mount) is required"
}

func (c *controllerServer) ValidateVolumeCapabilities(ctx context.Context, req *csi.ValidateVolumeCapabilitiesRequest) (*csi.ValidateVolumeCapabilitiesResponse, error) {
	if req.GetVolumeId() == "" {
		return nil, status.Error(codes.InvalidArgument, "volume_id is required")
	}
	if len(req.GetVolumeCapabilities()) == 0 {
		return nil, status.Error(codes.InvalidArgument, "volume_capabilities are required")
	}
	s := c.d.store
	s.mu.Lock()
	v, ok := s.volumes[req.GetVolumeId()]
	var have volume
	if ok {
		have = *v
	}
	s.mu.Unlock()
	if !ok {
		return nil, status.Errorf(codes.NotFound, "volume %s does not exist", req.GetVolumeId())
	}
	for _, vc := range req.GetVolumeCapabilities() {
		if why := capabilityProblem(vc); why != "" {
			return &csi.ValidateVolumeCapabilitiesResponse{Message: why}, nil
		}
		if (vc.GetBlock() != nil) != have.Block {
			return &csi.ValidateVolumeCapabilitiesResponse{Message: "access type differs from the volume's"}, nil
		}
	}
	if req.GetParameters() != nil && !maps.Equal(req.GetParameters(), have.Parameters) {
		return &csi.ValidateVolumeCapabilitiesResponse{Message: "parameters differ from those the volume was created with"}, nil
	}
	return &csi.ValidateVolumeCapabilitiesResponse{Confirmed: &csi.ValidateVolumeCapabilitiesResponse_Confirmed{
		VolumeContext:      req.GetVolumeContext(),
		VolumeCapabilities: req.GetVolumeCapabilities(),
		Parameters:         req.GetParameters(),
	}}, nil
}

func (c *controllerServer) ListVolumes(ctx context.Context, req *csi.ListVolumesRequest) (*csi.ListVolumesResponse, error) {
	s := c.d.store
	s.mu.Lock()
	defer s.mu.Unlock()
	page, next, err := paginate(sortedIDs(s.volumes), req.GetStartingToken(), req.GetMaxEntries(), "volumes:")
	if err != nil {
		return nil, err
	}
	out := &csi.ListVolumesResponse{NextToken: next}
	for _, id := range page {
		v := s.volumes[id]
		out.Entries = append(out.Entries, &csi.ListVolumesResponse_Entry{
			Volume: c.d.csiVolume(v),
			Status: &csi.ListVolumesResponse_VolumeStatus{PublishedNodeIds: sortedIDs(v.Published)},
		})
	}
	return out, nil
}

// paginate returns the page of sorted ids a token and a maximum select. A
// token names the first id of its page, so deleting the last id of a page
// does not invalidate the next one.
func paginate(ids []string, token string, maxEntries int32, prefix string) ([]string, string, error) {
	if maxEntries < 0 {
		return nil, "", status.Error(codes.InvalidArgument, "max_entries must not be negative")
	}
	start := 0
	if token != "" {
		from, ok := strings.CutPrefix(token, prefix)
		if !ok || !validID(from) {
			return nil, "", status.Errorf(codes.Aborted, "starting_token %q was not issued by this driver", token)
		}
		start = sort.SearchStrings(ids, from)
	}
	end := len(ids)
	next := ""
	if maxEntries > 0 && start+int(maxEntries) < end {
		end = start + int(maxEntries)
		next = prefix + ids[end]
	}
	return ids[start:end], next, nil
}

func (c *controllerServer) ControllerGetVolume(ctx context.Context, req *csi.ControllerGetVolumeRequest) (*csi.ControllerGetVolumeResponse, error) {
	if req.GetVolumeId() == "" {
		return nil, status.Error(codes.InvalidArgument, "volume_id is required")
	}
	s := c.d.store
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.volumes[req.GetVolumeId()]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "volume %s does not exist", req.GetVolumeId())
	}
	return &csi.ControllerGetVolumeResponse{
		Volume: c.d.csiVolume(v),
		Status: &csi.ControllerGetVolumeResponse_VolumeStatus{PublishedNodeIds: sortedIDs(v.Published)},
	}, nil
}

// GetCapacity reports the free space of the pool the parameters select.
func (c *controllerServer) GetCapacity(ctx context.Context, req *csi.GetCapacityRequest) (*csi.GetCapacityResponse, error) {
	pool, err := c.d.pool(req.GetParameters())
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	s := c.d.store
	s.mu.Lock()
	free := max(pool.CapacityBytes-s.used(pool.Name), 0)
	s.mu.Unlock()
	return &csi.GetCapacityResponse{
		AvailableCapacity: free,
		MaximumVolumeSize: wrapperspb.Int64(free / sizeAlign * sizeAlign),
		MinimumVolumeSize: wrapperspb.Int64(sizeAlign),
	}, nil
}

// ControllerPublishVolume records the attachment of a volume to the node.
func (c *controllerServer) ControllerPublishVolume(ctx context.Context, req *csi.ControllerPublishVolumeRequest) (*csi.ControllerPublishVolumeResponse, error) {
	id, node := req.GetVolumeId(), req.GetNodeId()
	switch {
	case id == "":
		return nil, status.Error(codes.InvalidArgument, "volume_id is required")
	case node == "":
		return nil, status.Error(codes.InvalidArgument, "node_id is required")
	case req.GetVolumeCapability() == nil:
		return nil, status.Error(codes.InvalidArgument, "volume_capability is required")
	}
	if why := capabilityProblem(req.GetVolumeCapability()); why != "" {
		return nil, status.Error(codes.InvalidArgument, why)
	}
	s := c.d.store
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.volumes[id]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "volume %s does not exist", id)
	}
	if node != c.d.cfg.NodeID {
		return nil, status.Errorf(codes.NotFound, "node %s does not exist", node)
	}
	if ro, ok := v.Published[node]; ok {
		if ro != req.GetReadonly() {
			return nil, status.Errorf(codes.AlreadyExists, "volume %s is published to %s with readonly=%v", id, node, ro)
		}
		return &csi.ControllerPublishVolumeResponse{}, nil
	}
	updated := *v
	updated.Published = maps.Clone(v.Published)
	if updated.Published == nil {
		updated.Published = map[string]bool{}
	}
	updated.Published[node] = req.GetReadonly()
	if err := writeJSON(s.volumeMeta(id), updated); err != nil {
		return nil, status.Errorf(codes.Internal, "publish volume %s: %v", id, err)
	}
	*v = updated
	return &csi.ControllerPublishVolumeResponse{}, nil
}

// ControllerUnpublishVolume forgets an attachment; unknown ones are gone already.
func (c *controllerServer) ControllerUnpublishVolume(ctx context.Context, req *csi.ControllerUnpublishVolumeRequest) (*csi.ControllerUnpublishVolumeResponse, error) {
	id, node := req.GetVolumeId(), req.GetNodeId()
	if id == "" {
		return nil, status.Error(codes.InvalidArgument, "volume_id is required")
	}
	s := c.d.store
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.volumes[id]
	if !ok || len(v.Published) == 0 {
		return &csi.ControllerUnpublishVolumeResponse{}, nil
	}
	updated := *v
	updated.Published = maps.Clone(v.Published)
	if node == "" {
		updated.Published = nil
	} else {
		delete(updated.Published, node)
	}
	if err := writeJSON(s.volumeMeta(id), updated); err != nil {
		return nil, status.Errorf(codes.Internal, "unpublish volume %s: %v", id, err)
	}
	*v = updated
	return &csi.ControllerUnpublishVolumeResponse{}, nil
}
