package scheduler

import (
	"time"

	corelisters "k8s.io/client-go/listers/core/v1"
	schedulinglisters "k8s.io/client-go/listers/scheduling/v1beta1"

	"github.com/gpufabric/gpufabric/pkg/gang/evict"
	"github.com/gpufabric/gpufabric/pkg/gang/preemption"
	"github.com/gpufabric/gpufabric/pkg/gang/queue"
)

// rankOf returns the queue's rank function: a gang's rank from the
// informers, a PodGroup at its effective priority (evict.Priorities:
// never above its class's value or its pods'); unknown gangs (deleted, or
// not seen yet) rank as priority 0, created now.
func rankOf(pods corelisters.PodLister, podGroups schedulinglisters.PodGroupLister, prios *evict.Priorities) func(key string) queue.Rank {
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
		return queue.Rank{Priority: prios.Rank(pg), Since: pg.CreationTimestamp.Time}
	}
}
