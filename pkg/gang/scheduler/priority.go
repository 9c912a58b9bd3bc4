package scheduler

import (
	"time"

	schedulingv1alpha3 "k8s.io/api/scheduling/v1alpha3"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	corelisters "k8s.io/client-go/listers/core/v1"
	schedulinglistersv1alpha3 "k8s.io/client-go/listers/scheduling/v1alpha3"
	schedulinglisters "k8s.io/client-go/listers/scheduling/v1beta1"

	"github.com/gpufabric/gpufabric/pkg/gang/evict"
	"github.com/gpufabric/gpufabric/pkg/gang/preemption"
	"github.com/gpufabric/gpufabric/pkg/gang/queue"
	"github.com/gpufabric/gpufabric/pkg/gang/trees"
	"github.com/gpufabric/gpufabric/pkg/gang/vocab"
)

// rankOf returns the queue's rank function: a gang's rank from the
// informers, a PodGroup at its effective priority (evict.Priorities:
// never above its class's value or its pods'), a tree at its root's,
// capped the same way by the root's class and its leaves' pods
// (treeRank); unknown gangs (deleted, or not seen yet) rank as priority
// 0, created now.
func rankOf(pods corelisters.PodLister, podGroups schedulinglisters.PodGroupLister, composites schedulinglistersv1alpha3.CompositePodGroupLister, leaves treeLeaves, prios *evict.Priorities) func(key string) queue.Rank {
	return func(key string) queue.Rank {
		isGroup, ns, name := queue.SplitKey(key)
		if vocab.IsCompositeKey(key) {
			return treeRank(composites, leaves, prios, ns, name)
		}
		if !isGroup {
			p, err := pods.Pods(ns).Get(name)
			if err != nil {
				return queue.Rank{Since: time.Now()}
			}
			return queue.Rank{Priority: preemption.PodPriority(p), Since: p.CreationTimestamp.Time}
		}
		pg, err := podGroups.PodGroups(ns).Get(name)
		if err != nil {
			return queue.Rank{Since: time.Now()}
		}
		return queue.Rank{Priority: prios.Rank(pg), Since: pg.CreationTimestamp.Time}
	}
}

// treeLeaves lists the leaf PodGroups under a root (trees.Reader.Leaves;
// nil past a tree's bounds).
type treeLeaves func(root *schedulingv1alpha3.CompositePodGroup) []*schedulingv1beta1.PodGroup

// leavesOf is r's treeLeaves: past a tree's bounds, the leaves read
// before them.
func leavesOf(r *trees.Reader) treeLeaves {
	return func(root *schedulingv1alpha3.CompositePodGroup) []*schedulingv1beta1.PodGroup {
		pgs, _ := r.Leaves(root)
		return pgs
	}
}

// treeRank is a tree's rank: its root CompositePodGroup's spec.priority
// (as kube-scheduler orders trees; nil: 0), never above its class's value
// or its leaves' pods' (evict.Priorities.TreeRank, as its preemption
// values it: a tenant's root cannot ask its way ahead), and creation.
func treeRank(composites schedulinglistersv1alpha3.CompositePodGroupLister, leaves treeLeaves, prios *evict.Priorities, ns, name string) queue.Rank {
	if composites == nil {
		return queue.Rank{Since: time.Now()}
	}
	c, err := composites.CompositePodGroups(ns).Get(name)
	if err != nil {
		return queue.Rank{Since: time.Now()}
	}
	return queue.Rank{Priority: prios.TreeRank(c, func() []*schedulingv1beta1.PodGroup { return leaves(c) }), Since: c.CreationTimestamp.Time}
}
