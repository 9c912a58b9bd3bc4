package scheduler

import (
	"slices"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/gpufabric/gpufabric/pkg/gang/guard"
)

// handlerOf turns set and remove callbacks for one object type into
// informer handlers (tombstones unwrapped; other types ignored).
func handlerOf[T any](set, remove func(T)) cache.ResourceEventHandlerFuncs {
	return cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if o, ok := obj.(T); ok {
				set(o)
			}
		},
		UpdateFunc: func(_, obj any) {
			if o, ok := obj.(T); ok {
				set(o)
			}
		},
		DeleteFunc: func(obj any) {
			if o, ok := tombstone[T](obj); ok {
				remove(o)
			}
		},
	}
}

// cacheFeed returns the handlers that keep the placement cache (not nil)
// up to date from the informers: the scheduler's snapshots are brought up
// to date from it each cycle instead of being rebuilt from listers (index.Cache).
// informerSet.watch runs each of them before the queue's handler of the
// same informer, so a gang woken by a change is tried on a cache that has
// it. Holds (guard.IsHold) are left out, as they duplicate their claims'
// devices. Claim and slice events count as capacity events once the cache
// has them, so the free-GPU gauges (read from the cache) are refreshed
// after the cache changed.
func (sn *snapshots) cacheFeed(inf *informerSet) []informerHandler {
	c := sn.cache
	claim := func(rc *resourceapi.ResourceClaim) {
		if guard.IsHold(rc, sn.recordNamespace) {
			c.DeleteClaim(rc.UID)
		} else {
			c.SetClaim(rc)
		}
		inf.capacityEvents.Add(1)
	}
	slice := func(sl *resourceapi.ResourceSlice) {
		c.SetSlice(sl)
		inf.capacityEvents.Add(1)
	}
	return []informerHandler{
		{inf.nodes, handlerOf(c.SetNode, func(n *v1.Node) { c.DeleteNode(n.Name) })},
		{inf.pods, handlerOf(c.SetPod, func(p *v1.Pod) { c.DeletePod(p.UID) })},
		{inf.slices, handlerOf(slice, func(sl *resourceapi.ResourceSlice) { c.DeleteSlice(sl.Name); inf.capacityEvents.Add(1) })},
		{inf.classes, handlerOf(c.SetClass, func(dc *resourceapi.DeviceClass) { c.DeleteClass(dc.Name) })},
		{inf.claims, handlerOf(claim, func(rc *resourceapi.ResourceClaim) { c.DeleteClaim(rc.UID); inf.capacityEvents.Add(1) })},
	}
}

// chainFirst puts each handler of first before the first handler of then
// of the same informer (one handler calling both, in that order); the
// others are added as they are.
func chainFirst(first, then []informerHandler) []informerHandler {
	out := slices.Clone(then)
	for _, f := range first {
		i := slices.IndexFunc(out, func(h informerHandler) bool { return h.inf == f.inf })
		if i < 0 {
			out = append(out, f)
			continue
		}
		a, b := f.h, out[i].h
		out[i].h = cache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { a.OnAdd(obj, false); b.OnAdd(obj, false) },
			UpdateFunc: func(old, obj any) { a.OnUpdate(old, obj); b.OnUpdate(old, obj) },
			DeleteFunc: func(obj any) { a.OnDelete(obj); b.OnDelete(obj) },
		}
	}
	return out
}
