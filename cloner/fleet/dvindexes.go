package fleet

import (
	"k8s.io/client-go/tools/cache"

	"github.com/cozystack/csi-clone-sidecar/cloner/config"
)

const (
	IndexByClaim  = "claim"  // DataVolume by the namespace/name of its PVC
	IndexByGolden = "golden" // worker DataVolume by the golden it names
	IndexByFlavor = "flavor" // HTTP-import DataVolume by its Factory flavor
	// IndexByDataSource: DataVolume by the DataSource its sourceRef names;
	// a golden's change reaches these through the DataSources of it.
	IndexByDataSource = "datasource"
)

// DataVolumeIndexers index the DataVolume cache for the joins from a
// changed PVC, PV or golden back to the disks it touches.
func DataVolumeIndexers(goldenNamespaces config.Namespaces) cache.Indexers {
	one := func(f func(*CachedDataVolume) string) cache.IndexFunc {
		return func(obj any) ([]string, error) {
			if dv, ok := obj.(*CachedDataVolume); ok && dv.ReadErr == "" {
				if k := f(dv); k != "" {
					return []string{k}, nil
				}
			}
			return nil, nil
		}
	}
	return cache.Indexers{
		// Sparse: CDI names a DataVolume's PVC after it, and a store
		// lookup finds those; only the others are indexed (DataVolumesOf).
		IndexByClaim: one(func(dv *CachedDataVolume) string {
			if claim := ClaimName(&dv.DataVolume); claim != dv.Name {
				return dv.Namespace + "/" + claim
			}
			return ""
		}),
		IndexByGolden: one(func(dv *CachedDataVolume) string {
			if src := dv.Spec.Source; src != nil && src.PVC != nil {
				ns := src.PVC.Namespace
				if ns == "" {
					ns = dv.Namespace
				}
				return ns + "/" + src.PVC.Name
			}
			if ann := dv.Annotations[AnnGolden]; ann != "" {
				return GoldenAnnotationRef(ann, goldenNamespaces.Primary()).String()
			}
			return ""
		}),
		IndexByDataSource: one(func(dv *CachedDataVolume) string {
			if ref := DataSourceRef(&dv.DataVolume); ref.Name != "" {
				return ref.String()
			}
			return ""
		}),
		IndexByFlavor: one(func(dv *CachedDataVolume) string {
			if src := dv.Spec.Source; src != nil && src.HTTP != nil {
				if f, ok := FactoryFlavor(src.HTTP.URL); ok {
					return f.Key()
				}
			}
			return ""
		}),
	}
}

// DataVolumesOf returns the readable DataVolumes whose PVC is the claim
// key: the one of the same name, unless its PVC is another, and those the
// sparse claim index holds.
func DataVolumesOf(idx cache.Indexer, key string) []any {
	objs, _ := idx.ByIndex(IndexByClaim, key)
	if o, ok, _ := idx.GetByKey(key); ok {
		if dv := o.(*CachedDataVolume); dv.ReadErr == "" && ClaimName(&dv.DataVolume) == dv.Name {
			objs = append(objs, o)
		}
	}
	return objs
}
