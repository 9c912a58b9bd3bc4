package scheduler

import (
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/gpufabric/gpufabric/pkg/gang/preemption"
	"github.com/gpufabric/gpufabric/pkg/gang/queue"
)

// rankOf returns a gang's rank from the informers; unknown gangs (deleted,
// or not seen yet) rank as priority 0, created now.
func (s *Scheduler) rankOf(key string) queue.Rank {
	isGroup, ns, name := queue.SplitKey(key)
	if !isGroup {
		p, err := s.pods.Pods(ns).Get(name)
		if err != nil {
			return queue.Rank{Since: time.Now()}
		}
		return queue.Rank{Priority: preemption.PodPriority(p), Since: p.CreationTimestamp.Time}
	}
	pg, err := s.podGroups.PodGroups(ns).Get(name)
	if err != nil {
		return queue.Rank{Since: time.Now()}
	}
	var members []*v1.Pod
	if pg.Spec.Priority == nil {
		if ms, err := s.members(pg); err == nil {
			members = ms.pending
		}
	}
	return queue.Rank{Priority: preemption.PodGroupPriority(pg, members), Since: pg.CreationTimestamp.Time}
}
