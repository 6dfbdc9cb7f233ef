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
	return fields(b, func(f wireField) (err error) {
		var m []byte
		switch f.num {
		case cvName:
			r.Name, err = f.text()
			return err
		case cvParameters:
			if m, err = f.message(); err == nil {
				err = decodeClaimParameter(&r.Parameters, m)
			}
		case cvCapacity:
			if m, err = f.message(); err == nil {
				err = decodeCapacity(r, m)
			}
		case cvCapability:
			var block bool
			if m, err = f.message(); err == nil {
				block, err = isBlockAfter(false, m)
				r.Block = r.Block || block
			}
		case cvSource:
			if m, err = f.message(); err == nil {
				err = decodeContentSource(&r.SourceVolumeID, &r.SourceSnapshotID, m)
			}
		}
		return err
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
	return fields(b, func(f wireField) error {
		if f.num != cvrVolume {
			return nil
		}
		m, err := f.message()
		if err != nil {
			return err
		}
		return fields(m, func(g wireField) (err error) {
			switch g.num {
			case volumeCapacity:
				r.CapacityBytes, err = g.int()
			case volumeVolumeID:
				r.VolumeID, err = g.text()
			case volumeContentSrc:
				var src []byte
				if src, err = g.message(); err == nil {
					err = decodeContentSource(&r.SourceVolumeID, &r.SourceSnapshotID, src)
				}
			}
			return err
		})
	})
}

var (
	dvVolumeID   = field(&csi.DeleteVolumeRequest{}, "volume_id")
	dsSnapshotID = field(&csi.DeleteSnapshotRequest{}, "snapshot_id")
)

func decodeDeleteVolumeRequest(o *Observation, b []byte) error {
	return decodeOneString(&o.Request.VolumeID, wireField{typ: protowire.BytesType, b: b}, dvVolumeID)
}

func decodeDeleteSnapshotRequest(o *Observation, b []byte) error {
	return decodeOneString(&o.Request.SnapshotID, wireField{typ: protowire.BytesType, b: b}, dsSnapshotID)
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
		var m []byte
		switch f.num {
		case evVolumeID:
			r.VolumeID, err = f.text()
		case evCapacity:
			if m, err = f.message(); err == nil {
				err = decodeCapacity(r, m)
			}
		case evCapability:
			if m, err = f.message(); err == nil {
				// A repeated occurrence merges; the last access type wins.
				r.Block, err = isBlockAfter(r.Block, m)
			}
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
	return fields(b, func(f wireField) (err error) {
		var v int64
		switch f.num {
		case evrCapacity:
			o.Response.CapacityBytes, err = f.int()
		case evrNodeExp:
			v, err = f.int()
			o.Response.NodeExpansionRequired = v != 0
		}
		return err
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
	return fields(b, func(f wireField) (err error) {
		switch f.num {
		case csSourceVolume:
			r.SourceVolumeID, err = f.text()
		case csName:
			r.Name, err = f.text()
		case csParameters:
			var m []byte
			if m, err = f.message(); err == nil {
				err = decodeClaimParameter(&r.Parameters, m)
			}
		}
		return err
	})
}

func decodeCreateSnapshotResponse(o *Observation, b []byte) error {
	r := &o.Response
	return fields(b, func(f wireField) error {
		if f.num != csrSnapshot {
			return nil
		}
		m, err := f.message()
		if err != nil {
			return err
		}
		return fields(m, func(g wireField) (err error) {
			switch g.num {
			case snapSize:
				r.SnapshotSizeBytes, err = g.int()
			case snapID:
				r.SnapshotID, err = g.text()
			case snapSource:
				r.SourceVolumeID, err = g.text()
			}
			return err
		})
	})
}
