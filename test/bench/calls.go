package main

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/cozystack/csi-clone-sidecar/sidecar"
)

const (
	goldenVolume = "pvc-golden-talos-v1-11" // every CreateVolume clones it
	capacity     = 20 << 30
	pvcNameKey   = "csi.storage.k8s.io/pvc/name"
)

// kind is one call the bench measures.
type kind struct {
	label  string
	method string // the full gRPC method, as observations name it
	seq    int    // sequential calls per latency round
	req    *csi.CreateVolumeRequest
}

// kinds are the short-mode calls: one the tap only times, and two
// CreateVolumes it decodes, realistic and huge.
func kinds(seq, largeSeq int) []*kind {
	return []*kind{
		{label: "ControllerGetCapabilities (timed, never decoded by the tap)",
			method: "/csi.v1.Controller/ControllerGetCapabilities", seq: seq},
		realistic("4k", seq),
		huge("1m", largeSeq),
	}
}

// realistic is a CreateVolume carrying about a StorageClass's worth of
// parameters (~60 keys, 4 KiB); huge one of 1 MiB, near what a Kubernetes
// object can hold, to show how the tap's cost grows with a request's size.
func realistic(name string, seq int) *kind { return createVolumeKind(name, 4<<10, 6, seq) }
func huge(name string, seq int) *kind      { return createVolumeKind(name, 1<<20, 1000, seq) }

func createVolumeKind(name string, size, valueLen, seq int) *kind {
	req := createVolume("pvc-bench-"+name, size, valueLen)
	label := fmt.Sprintf("CreateVolume, %d-byte request (%d parameters, secrets, clone source)",
		proto.Size(req), len(req.Parameters))
	return &kind{label: label, method: "/csi.v1.Controller/CreateVolume", seq: seq, req: req}
}

// createVolume builds a clone's CreateVolume as csi-provisioner sends it:
// StorageClass parameters plus the keys the provisioner adds, the
// provisioner secrets, a capacity range and a block capability. Filler
// parameters of valueLen bytes bring the request to size: the tap has to
// get past all of them to find the keys the cloner reads.
func createVolume(name string, size, valueLen int) *csi.CreateVolumeRequest {
	req := &csi.CreateVolumeRequest{
		Name:          name,
		CapacityRange: &csi.CapacityRange{RequiredBytes: capacity},
		VolumeCapabilities: []*csi.VolumeCapability{{
			AccessType: &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}},
			AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER},
		}},
		Parameters: map[string]string{
			pvcNameKey:                         strings.TrimPrefix(name, "pvc-"),
			"csi.storage.k8s.io/pvc/namespace": "tenant-bench",
			"csi.storage.k8s.io/pv/name":       name,
		},
		Secrets: map[string]string{"username": "bench", "password": "planted-secret-never-kept"},
		VolumeContentSource: &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Volume{
			Volume: &csi.VolumeContentSource_VolumeSource{VolumeId: goldenVolume},
		}},
	}
	for i := 0; proto.Size(req) < size; i++ {
		key := fmt.Sprintf("property.linstor.csi.linbit.com/DrbdOptions/Net/opt%04d", i)
		req.Parameters[key] = strings.Repeat("v", valueLen)
	}
	return req
}

// call makes one call of this kind. Requests are shared by every caller:
// marshalling only reads them.
func (k *kind) call(ctx context.Context, c csi.ControllerClient) error {
	if k.req == nil {
		_, err := c.ControllerGetCapabilities(ctx, &csi.ControllerGetCapabilitiesRequest{})
		return err
	}
	_, err := c.CreateVolume(ctx, k.req)
	return err
}

// decoded tells whether o is a call of this kind with every field the
// cloner needs decoded correctly; a call the tap published without its
// fields, or mangled, does not count.
func (k *kind) decoded(o sidecar.Observation) bool {
	if k.req == nil || o.Method != k.method || o.Code != codes.OK {
		return false
	}
	q := o.Request
	return q.Name == k.req.Name && q.SourceVolumeID == goldenVolume && q.RequiredBytes == capacity && q.Block &&
		q.Parameters[pvcNameKey] == k.req.Parameters[pvcNameKey] &&
		o.Response.VolumeID == volumeID(k.req.Name) && o.Response.CapacityBytes == capacity
}

// tally counts what the tap delivered: every observation by method, and per
// kind those decoded in full.
type tally struct {
	kinds    []*kind
	mu       sync.Mutex
	byMethod map[string]int
	decoded  map[*kind]int
}

func newTally(ks []*kind) *tally {
	return &tally{kinds: ks, byMethod: map[string]int{}, decoded: map[*kind]int{}}
}

// Observes selects the methods the tap decodes, as the verdict engine does,
// so relay+tap costs here what it costs in the binary.
func (t *tally) Observes(method string) bool { return sidecar.DecodedMethod(method) }

func (t *tally) Observe(o sidecar.Observation) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.byMethod[o.Method]++
	for _, k := range t.kinds {
		if k.decoded(o) {
			t.decoded[k]++
		}
	}
}

func (t *tally) counts(k *kind) (observed, decoded int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.byMethod[k.method], t.decoded[k]
}

// add counts what a relay process's tap delivered.
func (t *tally) add(c childCounts) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for m, n := range c.ByMethod {
		t.byMethod[m] += n
	}
	for _, k := range t.kinds {
		if k.req != nil {
			t.decoded[k] += c.Decoded[k.req.Name]
		}
	}
}
