package cloner

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/cozystack/csi-clone-sidecar/cloner/fleet"
)

// The evidence loop's reads of the informers' caches (evidence.Lookup).

func (c *Controller) pvByHandle(handle string) *corev1.PersistentVolume {
	if pv := c.volume(handle); pv != nil && fleet.CsiHandle(pv) == handle {
		return pv
	}
	objs, err := c.pvInf.GetIndexer().ByIndex(indexByHandle, handle)
	if err != nil || len(objs) == 0 {
		return nil
	}
	return objs[0].(*corev1.PersistentVolume)
}

// targetClaim is the PVC a failed CreateVolume's error belongs on: the
// target of CDI's tmp-pvc-<uid>, or the claim itself.
func (c *Controller) targetClaim(claim string) *corev1.PersistentVolumeClaim {
	uid, ref := fleet.TargetOfClaim(claim)
	if uid != "" {
		ref, ok := c.claimUIDs.Get(uid)
		if pvc := c.claim(ref); ok && pvc != nil && pvc.UID == uid {
			return pvc
		}
		return nil
	}
	return c.claim(ref)
}

func (c *Controller) claim(ref types.NamespacedName) *corev1.PersistentVolumeClaim {
	obj, ok, err := c.pvcInf.GetStore().GetByKey(ref.Namespace + "/" + ref.Name)
	if err != nil || !ok {
		return nil
	}
	return obj.(*corev1.PersistentVolumeClaim)
}

// contentSource is the volume the VolumeSnapshotContent of a snapshot
// handle was cut from, while it exists.
func (c *Controller) contentSource(snapshot string) string {
	p := c.vscInf.Load()
	if p == nil {
		return ""
	}
	objs, err := (*p).GetIndexer().ByIndex(indexBySnapshot, snapshot)
	if err != nil || len(objs) == 0 {
		return ""
	}
	src, _, _ := unstructured.NestedString(objs[0].(*unstructured.Unstructured).Object, "spec", "source", "volumeHandle")
	return src
}
