package scheduler

import (
	"time"

	v1 "k8s.io/api/core/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	schedulinglisters "k8s.io/client-go/listers/scheduling/v1beta1"

	"github.com/gpufabric/gpufabric/pkg/gang/preemption"
	"github.com/gpufabric/gpufabric/pkg/gang/queue"
)

// rankOf returns the queue's rank function: a gang's rank from the
// informers; unknown gangs (deleted, or not seen yet) rank as priority 0,
// created now.
func rankOf(pods corelisters.PodLister, podGroups schedulinglisters.PodGroupLister, gangs *gangPods) func(key string) queue.Rank {
	return func(key string) queue.Rank {
		isGroup, ns, name := queue.SplitKey(key)
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
		var members []*v1.Pod
		if pg.Spec.Priority == nil {
			if ms, err := gangs.members(pg); err == nil {
				members = ms.pending
			}
		}
		return queue.Rank{Priority: preemption.PodGroupPriority(pg, members), Since: pg.CreationTimestamp.Time}
	}
}
