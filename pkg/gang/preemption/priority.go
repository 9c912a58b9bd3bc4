package preemption

import (
	"fmt"

	v1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	schedulingv1alpha3 "k8s.io/api/scheduling/v1alpha3"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
)

// Priorities, as kube-scheduler 1.37 resolves them (KEP-5710):
//   - a PodGroup's priority is spec.priority (the Priority admission plugin
//     sets it from spec.priorityClassName, or the global default class, and
//     refuses any other value); when it is unset (admission plugin off)
//     gpufabric takes the lowest priority of the pods given, where
//     kube-scheduler takes 0;
//   - a pod's is spec.priority, 0 when unset;
//   - a PodGroup's preemption policy is spec.preemptionPolicy with the
//     PodGroupPreemptionPolicy gate on, else Never when a member says Never.
//
// gpufabric's guards on top (Resolve; docs/design/preemption.md, "Priority"):
// a PodGroup's spec is checked by no ResourceQuota and, with the gate off,
// carries no preemptionPolicy, while its pods' spec.priority and
// spec.preemptionPolicy were set by the Priority admission plugin and
// checked by ResourceQuota admission. So a gang never ranks above its
// class's value nor above the lowest priority its pods were admitted with,
// and a Never anywhere (the PodGroup's field, its class, a member) means
// it does not preempt.

// PodPriority is a pod's priority.
func PodPriority(p *v1.Pod) int32 {
	if p.Spec.Priority != nil {
		return *p.Spec.Priority
	}
	return 0
}

// PodGroupPriority is the priority a PodGroup asks for, before the guards
// of Resolve; members are used only when spec.priority is unset.
func PodGroupPriority(pg *schedulingv1beta1.PodGroup, members []*v1.Pod) int32 {
	if pg.Spec.Priority != nil {
		return *pg.Spec.Priority
	}
	if len(members) == 0 {
		return 0
	}
	return lowest(members)
}

func lowest(pods []*v1.Pod) int32 {
	low := PodPriority(pods[0])
	for _, p := range pods[1:] {
		low = min(low, PodPriority(p))
	}
	return low
}

// MayPreempt reports whether a gang may preempt lower-priority workloads
// by the policies its objects carry: not when the PodGroup's
// preemptionPolicy or any member's is Never (Resolve adds the class).
func MayPreempt(pg *schedulingv1beta1.PodGroup, members []*v1.Pod) bool {
	return neverReason(pg, nil, members) == ""
}

// Effective is a gang's priority and preemption policy after gpufabric's
// guards.
type Effective struct {
	// Priority ranks the gang in the queue and against victims.
	Priority int32
	// Requested is what the PodGroup asks for (PodGroupPriority).
	Requested int32
	// Capped says why Priority is below Requested; "" when it is not.
	Capped string
	// NoPreemption says why the gang may not preempt; "" when it may.
	NoPreemption string
}

// Resolve returns a PodGroup gang's effective priority and policy. class
// is the PriorityClass its spec.priorityClassName names (nil: none, or not
// found); members are its pods (any state: each was admitted in the
// PodGroup's namespace). Rules:
//   - Priority is the least of Requested, the class's value and the lowest
//     member priority (no member: Requested and the class's value only);
//   - NoPreemption is set when the PodGroup's preemptionPolicy, its
//     class's or a member's is Never.
func Resolve(pg *schedulingv1beta1.PodGroup, class *schedulingv1.PriorityClass, members []*v1.Pod) Effective {
	e := capped("PodGroup", PodGroupPriority(pg, members), class, members)
	e.NoPreemption = neverReason(pg, class, members)
	return e
}

// ResolveTree returns a CompositePodGroup tree's effective priority and
// policy by Resolve's rules, the root standing for the PodGroup (as
// kube-scheduler, a tree's priority and policy are its root's): class is
// the root's PriorityClass, members every pod of the tree's leaves.
func ResolveTree(root *schedulingv1alpha3.CompositePodGroup, class *schedulingv1.PriorityClass, members []*v1.Pod) Effective {
	requested := int32(0)
	switch {
	case root.Spec.Priority != nil:
		requested = *root.Spec.Priority
	case len(members) > 0:
		requested = lowest(members)
	}
	e := capped("CompositePodGroup", requested, class, members)
	if p := root.Spec.PreemptionPolicy; p != nil && *p == schedulingv1alpha3.PreemptNever {
		e.NoPreemption = "the root CompositePodGroup's preemptionPolicy is Never"
	} else {
		e.NoPreemption = neverReason(nil, class, members)
	}
	return e
}

// capped caps what a group (kind) requests by its class's value and its
// members' lowest priority.
func capped(kind string, requested int32, class *schedulingv1.PriorityClass, members []*v1.Pod) Effective {
	e := Effective{Requested: requested, Priority: requested}
	if class != nil && class.Value < e.Priority {
		e.Priority = class.Value
		e.Capped = fmt.Sprintf("PriorityClass %s has value %d", class.Name, class.Value)
	}
	if len(members) > 0 {
		if low := lowest(members); low < e.Priority {
			e.Priority = low
			e.Capped = fmt.Sprintf("its pods were admitted with priority %d or lower", low)
		}
	}
	if e.Capped != "" {
		e.Capped = fmt.Sprintf("priority capped at %d (the %s asks for %d; %s)", e.Priority, kind, e.Requested, e.Capped)
	}
	return e
}

// ResolvePod returns a gang of one pod's priority and policy: its own.
func ResolvePod(p *v1.Pod) Effective {
	e := Effective{Priority: PodPriority(p), Requested: PodPriority(p)}
	if p.Spec.PreemptionPolicy != nil && *p.Spec.PreemptionPolicy == v1.PreemptNever {
		e.NoPreemption = "its preemptionPolicy is Never"
	}
	return e
}

// neverReason says which object forbids preemption, "" when none does.
func neverReason(pg *schedulingv1beta1.PodGroup, class *schedulingv1.PriorityClass, members []*v1.Pod) string {
	if pg != nil && pg.Spec.PreemptionPolicy != nil && *pg.Spec.PreemptionPolicy == schedulingv1beta1.PreemptNever {
		return "the PodGroup's preemptionPolicy is Never"
	}
	if class != nil && class.PreemptionPolicy != nil && *class.PreemptionPolicy == v1.PreemptNever {
		return fmt.Sprintf("PriorityClass %s has preemptionPolicy Never", class.Name)
	}
	for _, p := range members {
		if p.Spec.PreemptionPolicy != nil && *p.Spec.PreemptionPolicy == v1.PreemptNever {
			return fmt.Sprintf("member %s has preemptionPolicy Never", p.Name)
		}
	}
	return ""
}
