package fleet

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// pvHandleIndex is sparse: most drivers (LINSTOR's among them) name the
// volume handle after the PV, and a store lookup finds those; only the
// others are indexed (pvByHandle).
func PvHandleIndex(obj any) ([]string, error) {
	if pv, ok := obj.(*corev1.PersistentVolume); ok {
		if h := CsiHandle(pv); h != "" && h != pv.Name {
			return []string{h}, nil
		}
	}
	return nil, nil
}

func SnapshotHandleIndex(obj any) ([]string, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return nil, nil
	}
	if h, _, err := unstructured.NestedString(u.Object, "status", "snapshotHandle"); err == nil && h != "" {
		return []string{h}, nil
	}
	return nil, nil
}

// sameButVersion reports whether two cached versions of an object differ
// in their resourceVersion only.
func SameButVersion(old, cur any) bool {
	switch o := old.(type) {
	case *corev1.PersistentVolumeClaim:
		c, ok := cur.(*corev1.PersistentVolumeClaim)
		return ok && equalButVersion(*o, *c)
	case *corev1.PersistentVolume:
		c, ok := cur.(*corev1.PersistentVolume)
		return ok && equalButVersion(*o, *c)
	case *CachedDataVolume:
		c, ok := cur.(*CachedDataVolume)
		return ok && o.ReadErr == c.ReadErr && equalButVersion(o.DataVolume, c.DataVolume)
	}
	return false
}

// equalButVersion compares shallow copies of two objects, their
// resourceVersions left out.
func equalButVersion[T any, P interface {
	*T
	metav1.Object
}](a, b T) bool {
	P(&a).SetResourceVersion("")
	P(&b).SetResourceVersion("")
	return equality.Semantic.DeepEqual(a, b)
}
