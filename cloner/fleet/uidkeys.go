package fleet

import (
	"sync"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
)

// UIDKeys finds a cached object by its UID. An informer index would do it,
// but an index keeps a set per value: about 300 bytes per object for a
// value only one object has, against about 50 here (the map's slot, whose
// strings are the object's own). It is kept by the informer's event
// handler, so it follows the store by the time a handler takes; its readers
// tolerate that (a clone's tmp-pvc names a claim made long before; a
// DataVolume not yet seen live is confirmed gone with the API server before
// the ledger forgets it).
type UIDKeys struct {
	mu sync.RWMutex
	m  map[types.UID]types.NamespacedName
}

// NewUIDKeys returns an empty UIDKeys.
func NewUIDKeys() *UIDKeys { return &UIDKeys{m: map[types.UID]types.NamespacedName{}} }

// Get returns the namespace/name of the object with the UID.
func (u *UIDKeys) Get(uid types.UID) (types.NamespacedName, bool) {
	u.mu.RLock()
	defer u.mu.RUnlock()
	ref, ok := u.m[uid]
	return ref, ok
}

// Track keeps u current from an informer's events.
func (u *UIDKeys) Track(inf cache.SharedIndexInformer) error {
	_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { u.Set(obj, true) },
		UpdateFunc: func(old, cur any) { u.Set(old, false); u.Set(cur, true) },
		DeleteFunc: func(obj any) {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			u.Set(obj, false)
		},
	})
	return err
}

// Set adds (present) or removes the object's UID.
func (u *UIDKeys) Set(obj any, present bool) {
	m, err := meta.Accessor(obj)
	if err != nil || m.GetUID() == "" {
		return
	}
	ref := types.NamespacedName{Namespace: m.GetNamespace(), Name: m.GetName()}
	u.mu.Lock()
	defer u.mu.Unlock()
	switch {
	case present:
		u.m[m.GetUID()] = ref
	case u.m[m.GetUID()] == ref:
		delete(u.m, m.GetUID())
	}
}
