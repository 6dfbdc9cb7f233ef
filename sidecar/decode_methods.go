package sidecar

import (
	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/protobuf/encoding/protowire"
)

// The fields of each decoded method the tap promises in Request and
// Response; everything else, secrets first, is skipped on the wire.

var (
	cvName       = field(&csi.CreateVolumeRequest{}, "name")
	cvCapacity   = field(&csi.CreateVolumeRequest{}, "capacity_range")
	cvCapability = field(&csi.CreateVolumeRequest{}, "volume_capabilities")
	cvParameters = field(&csi.CreateVolumeRequest{}, "parameters")
	cvSource     = field(&csi.CreateVolumeRequest{}, "volume_content_source")
)

func decodeCreateVolumeRequest(o *Observation, b []byte) error {
	r := &o.Request
	return fields(b, func(f wireField) error {
		if f.num == cvName {
			f.setText(&r.Name)
			return nil
		}
		m, ok := f.sub()
		switch {
		case !ok:
		case f.num == cvParameters:
			return decodeClaimParameter(&r.Parameters, m)
		case f.num == cvCapacity:
			return decodeCapacity(r, m)
		case f.num == cvCapability: // repeated: any block capability makes it block
			block, err := isBlockAfter(false, m)
			r.Block = r.Block || block
			return err
		case f.num == cvSource:
			return decodeContentSource(&r.SourceVolumeID, &r.SourceSnapshotID, m)
		}
		return nil
	})
}

var (
	cvrVolume        = field(&csi.CreateVolumeResponse{}, "volume")
	volumeCapacity   = field(&csi.Volume{}, "capacity_bytes")
	volumeVolumeID   = field(&csi.Volume{}, "volume_id")
	volumeContentSrc = field(&csi.Volume{}, "content_source")
)

func decodeCreateVolumeResponse(o *Observation, b []byte) error {
	r := &o.Response
	return embedded(b, cvrVolume, func(f wireField) error {
		switch f.num {
		case volumeCapacity:
			f.setInt(&r.CapacityBytes)
		case volumeVolumeID:
			f.setText(&r.VolumeID)
		case volumeContentSrc:
			if m, ok := f.sub(); ok {
				return decodeContentSource(&r.SourceVolumeID, &r.SourceSnapshotID, m)
			}
		}
		return nil
	})
}

// embedded calls visit for every field of each occurrence of the embedded
// message num in b (occurrences merge, as protobuf's do).
func embedded(b []byte, num protowire.Number, visit func(wireField) error) error {
	return fields(b, func(f wireField) error {
		if m, ok := f.sub(); ok && f.num == num {
			return fields(m, visit)
		}
		return nil
	})
}

var (
	dvVolumeID   = field(&csi.DeleteVolumeRequest{}, "volume_id")
	dsSnapshotID = field(&csi.DeleteSnapshotRequest{}, "snapshot_id")
)

func decodeDeleteVolumeRequest(o *Observation, b []byte) error {
	return decodeString(&o.Request.VolumeID, b, dvVolumeID)
}

func decodeDeleteSnapshotRequest(o *Observation, b []byte) error {
	return decodeString(&o.Request.SnapshotID, b, dsSnapshotID)
}

var (
	evVolumeID   = field(&csi.ControllerExpandVolumeRequest{}, "volume_id")
	evCapacity   = field(&csi.ControllerExpandVolumeRequest{}, "capacity_range")
	evCapability = field(&csi.ControllerExpandVolumeRequest{}, "volume_capability")
	evrCapacity  = field(&csi.ControllerExpandVolumeResponse{}, "capacity_bytes")
	evrNodeExp   = field(&csi.ControllerExpandVolumeResponse{}, "node_expansion_required")
)

func decodeExpandRequest(o *Observation, b []byte) error {
	r := &o.Request
	return fields(b, func(f wireField) (err error) {
		if f.num == evVolumeID {
			f.setText(&r.VolumeID)
			return nil
		}
		m, ok := f.sub()
		switch {
		case !ok:
		case f.num == evCapacity:
			return decodeCapacity(r, m)
		case f.num == evCapability: // singular: a repeated occurrence merges
			r.Block, err = isBlockAfter(r.Block, m)
		}
		return err
	})
}

// isBlockAfter tells whether a VolumeCapability's access type is block,
// merged into what an earlier occurrence said (the oneof's last member on
// the wire wins).
func isBlockAfter(was bool, b []byte) (bool, error) {
	block := was
	err := fields(b, func(f wireField) error {
		if f.typ != protowire.BytesType {
			return nil
		}
		switch f.num {
		case capabilityBlock:
			block = true
		case capabilityMount:
			block = false
		}
		return nil
	})
	return block, err
}

func decodeExpandResponse(o *Observation, b []byte) error {
	o.Response.VolumeID = o.Request.VolumeID
	return fields(b, func(f wireField) error {
		switch f.num {
		case evrCapacity:
			f.setInt(&o.Response.CapacityBytes)
		case evrNodeExp:
			if f.typ == protowire.VarintType {
				o.Response.NodeExpansionRequired = f.u != 0
			}
		}
		return nil
	})
}

var (
	csSourceVolume = field(&csi.CreateSnapshotRequest{}, "source_volume_id")
	csName         = field(&csi.CreateSnapshotRequest{}, "name")
	csParameters   = field(&csi.CreateSnapshotRequest{}, "parameters")
	csrSnapshot    = field(&csi.CreateSnapshotResponse{}, "snapshot")
	snapSize       = field(&csi.Snapshot{}, "size_bytes")
	snapID         = field(&csi.Snapshot{}, "snapshot_id")
	snapSource     = field(&csi.Snapshot{}, "source_volume_id")
)

func decodeCreateSnapshotRequest(o *Observation, b []byte) error {
	r := &o.Request
	return fields(b, func(f wireField) error {
		switch f.num {
		case csSourceVolume:
			f.setText(&r.SourceVolumeID)
		case csName:
			f.setText(&r.Name)
		case csParameters:
			if m, ok := f.sub(); ok {
				return decodeClaimParameter(&r.Parameters, m)
			}
		}
		return nil
	})
}

func decodeCreateSnapshotResponse(o *Observation, b []byte) error {
	r := &o.Response
	return embedded(b, csrSnapshot, func(f wireField) error {
		switch f.num {
		case snapSize:
			f.setInt(&r.SnapshotSizeBytes)
		case snapID:
			f.setText(&r.SnapshotID)
		case snapSource:
			f.setText(&r.SourceVolumeID)
		}
		return nil
	})
}
