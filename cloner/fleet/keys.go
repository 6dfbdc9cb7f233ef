package fleet

import "k8s.io/apimachinery/pkg/runtime/schema"

// Annotations the Cozystack golden worker image feature puts on DataVolumes.
const (
	AnnSchematicID  = "kubernetes-worker-image.cozystack.io/schematic-id"
	AnnTalosVersion = "kubernetes-worker-image.cozystack.io/talos-version"
	AnnGolden       = "kubernetes-worker-image.cozystack.io/golden"
	AnnPool         = "kubernetes-worker-image.cozystack.io/pool"
)

// What other goldens and disks carry: the image name Cozystack's
// vm-default-images package puts on each golden (templates/dv.yaml), and the
// Helm release label its vm-disk package puts on each disk.
const (
	AnnImageName  = "vm-default-images.cozystack.io/name"
	LabelInstance = "app.kubernetes.io/instance"
)

// Annotations this sidecar writes. The verdict pair lives on the worker disk's
// PVC under the feature's own prefix so `kubectl get pvc -o yaml` shows it next
// to the golden/pool annotations; raw storage-layer evidence uses the sidecar's
// prefix.
const (
	// AnnCloneVerdict is the verdict word on the worker PVC (e.g. "csi-clone").
	AnnCloneVerdict = "kubernetes-worker-image.cozystack.io/clone-verdict"
	// AnnCloneEvidence is the compact JSON Record behind the verdict, on the worker PVC.
	AnnCloneEvidence = "kubernetes-worker-image.cozystack.io/clone-evidence"
	// AnnCSIEvidence is the compact JSON VolumeEvidence the tap saw for the
	// volume, on its PV. It follows the PV through CDI's rebind.
	AnnCSIEvidence = "csi-clone-sidecar.cozystack.io/csi-evidence"
	// AnnDriverError is the compact JSON DriverError of the last failed
	// CreateVolume for a clone, on the clone's target PVC: a stuck clone has
	// no PV to carry it.
	AnnDriverError = "csi-clone-sidecar.cozystack.io/last-driver-error"
	// LabelLedger marks the ledger ConfigMap so `report` can find it.
	LabelLedger = "csi-clone-sidecar.cozystack.io/ledger"
)

// Annotations and parameters written by CDI, Kubernetes and the external-provisioner.
const (
	AnnCDICloneType       = "cdi.kubevirt.io/cloneType"
	AnnCDIFallbackReason  = "cdi.kubevirt.io/cloneFallbackReason"
	AnnDefaultVirtClass   = "storageclass.kubevirt.io/is-default-virt-class"
	AnnDefaultClass       = "storageclass.kubernetes.io/is-default-class"
	ParamPVCName          = "csi.storage.k8s.io/pvc/name"
	ParamPVCNamespace     = "csi.storage.k8s.io/pvc/namespace"
	CdiTmpPVCPrefix       = "tmp-pvc-"
	goldenNamePrefix      = "talos-worker-"
	EventSourceComponent  = "csi-clone-sidecar"
	CdiCloneTypeCSIClone  = "csi-clone"
	CdiCloneTypeSnapshot  = "snapshot"
	CdiCloneTypeHostAssis = "copy"
)

// Resources read through the dynamic client: CDI ships no typed clientset we
// want to depend on, and the snapshot CRDs may be absent.
var (
	DataVolumeGVR            = schema.GroupVersionResource{Group: "cdi.kubevirt.io", Version: "v1beta1", Resource: "datavolumes"}
	VolumeSnapshotContentGVR = schema.GroupVersionResource{Group: "snapshot.storage.k8s.io", Version: "v1", Resource: "volumesnapshotcontents"}
	VolumeSnapshotGVR        = schema.GroupVersionResource{Group: "snapshot.storage.k8s.io", Version: "v1", Resource: "volumesnapshots"}
)
