package cloner

import (
	"sync"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
)

// uidKeys finds a cached object by its UID. An informer index would do it,
// but an index keeps a set per value: about 300 bytes per object for a
// value only one object has, against about 50 here (the map's slot, whose
// strings are the object's own). It is kept by the informer's event
// handler, so it follows the store by the time a handler takes; its readers
// tolerate that (a clone's tmp-pvc names a claim made long before; a
// DataVolume not yet seen live is confirmed gone with the API server before
// the ledger forgets it).
type uidKeys struct {
	mu sync.RWMutex
	m  map[types.UID]types.NamespacedName
}

func newUIDKeys() *uidKeys { return &uidKeys{m: map[types.UID]types.NamespacedName{}} }

// get returns the namespace/name of the object with the UID.
func (u *uidKeys) get(uid types.UID) (types.NamespacedName, bool) {
	u.mu.RLock()
	defer u.mu.RUnlock()
	ref, ok := u.m[uid]
	return ref, ok
}

// track keeps u current from an informer's events.
func (u *uidKeys) track(inf cache.SharedIndexInformer) {
	_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { u.set(obj, true) },
		UpdateFunc: func(old, cur any) { u.set(old, false); u.set(cur, true) },
		DeleteFunc: func(obj any) {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			u.set(obj, false)
		},
	})
	must(err)
}

func (u *uidKeys) set(obj any, present bool) {
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
