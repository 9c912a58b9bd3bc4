package preemption

import (
	v1 "k8s.io/api/core/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
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

// PodPriority is a pod's priority.
func PodPriority(p *v1.Pod) int32 {
	if p.Spec.Priority != nil {
		return *p.Spec.Priority
	}
	return 0
}

// PodGroupPriority is a PodGroup's priority; members are used only when
// spec.priority is unset.
func PodGroupPriority(pg *schedulingv1beta1.PodGroup, members []*v1.Pod) int32 {
	if pg.Spec.Priority != nil {
		return *pg.Spec.Priority
	}
	if len(members) == 0 {
		return 0
	}
	low := PodPriority(members[0])
	for _, p := range members[1:] {
		low = min(low, PodPriority(p))
	}
	return low
}

// MayPreempt reports whether a gang may preempt lower-priority workloads.
func MayPreempt(pg *schedulingv1beta1.PodGroup, members []*v1.Pod) bool {
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
