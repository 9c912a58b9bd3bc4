package scheduler

import (
	"time"

	v1 "k8s.io/api/core/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"

	"github.com/gpufabric/gpufabric/pkg/gang/queue"
)

// Priorities, as kube-scheduler 1.37 resolves them:
//   - a PodGroup's priority is spec.priority (the Priority admission plugin
//     sets it from spec.priorityClassName, or the global default class, and
//     refuses any other value); when it is unset (admission plugin off)
//     gpufabric takes the lowest priority of the pods given, where
//     kube-scheduler takes 0;
//   - a pod's is spec.priority, 0 when unset;
//   - a PodGroup's preemption policy is spec.preemptionPolicy when set, else
//     Never when a member says Never, else PreemptLowerPriority.

// podPriority is a pod's priority.
func podPriority(p *v1.Pod) int32 {
	if p.Spec.Priority != nil {
		return *p.Spec.Priority
	}
	return 0
}

// podGroupPriority is a PodGroup's priority; members are used only when
// spec.priority is unset.
func podGroupPriority(pg *schedulingv1beta1.PodGroup, members []*v1.Pod) int32 {
	if pg.Spec.Priority != nil {
		return *pg.Spec.Priority
	}
	if len(members) == 0 {
		return 0
	}
	low := podPriority(members[0])
	for _, p := range members[1:] {
		low = min(low, podPriority(p))
	}
	return low
}

// mayPreempt reports whether a gang may preempt lower-priority workloads.
func mayPreempt(pg *schedulingv1beta1.PodGroup, members []*v1.Pod) bool {
	if pg != nil && pg.Spec.PreemptionPolicy != nil {
		return *pg.Spec.PreemptionPolicy != schedulingv1beta1.PreemptNever
	}
	for _, p := range members {
		if p.Spec.PreemptionPolicy != nil && *p.Spec.PreemptionPolicy == v1.PreemptNever {
			return false
		}
	}
	return true
}

// rankOf returns a gang's rank from the informers; unknown gangs (deleted,
// or not seen yet) rank as priority 0, created now.
func (s *Scheduler) rankOf(key string) queue.Rank {
	isGroup, ns, name := queue.SplitKey(key)
	if !isGroup {
		p, err := s.pods.Pods(ns).Get(name)
		if err != nil {
			return queue.Rank{Since: time.Now()}
		}
		return queue.Rank{Priority: podPriority(p), Since: p.CreationTimestamp.Time}
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
	return queue.Rank{Priority: podGroupPriority(pg, members), Since: pg.CreationTimestamp.Time}
}
