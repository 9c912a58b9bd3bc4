package preemption

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	"k8s.io/utils/ptr"
)

func TestPriorityResolution(t *testing.T) {
	pod := func(prio *int32, policy *v1.PreemptionPolicy) *v1.Pod {
		return &v1.Pod{Spec: v1.PodSpec{Priority: prio, PreemptionPolicy: policy}}
	}
	never := ptr.To(v1.PreemptNever)
	tests := []struct {
		name        string
		pg          *schedulingv1beta1.PodGroup
		members     []*v1.Pod
		wantPrio    int32
		wantPreempt bool
	}{
		{name: "spec priority wins over pods", pg: pgWith(ptr.To[int32](100), nil),
			members: []*v1.Pod{pod(ptr.To[int32](5), nil)}, wantPrio: 100, wantPreempt: true},
		{name: "unset: lowest member", pg: pgWith(nil, nil),
			members: []*v1.Pod{pod(ptr.To[int32](50), nil), pod(ptr.To[int32](7), nil)}, wantPrio: 7, wantPreempt: true},
		{name: "unset, no members", pg: pgWith(nil, nil), wantPrio: 0, wantPreempt: true},
		{name: "group policy Never", pg: pgWith(ptr.To[int32](1), ptr.To(schedulingv1beta1.PreemptNever)),
			members: []*v1.Pod{pod(nil, nil)}, wantPrio: 1, wantPreempt: false},
		{name: "group policy wins over a member", pg: pgWith(nil, ptr.To(schedulingv1beta1.PreemptLowerPriority)),
			members: []*v1.Pod{pod(nil, never)}, wantPrio: 0, wantPreempt: true},
		{name: "no group policy: a member says Never", pg: pgWith(nil, nil),
			members: []*v1.Pod{pod(nil, nil), pod(nil, never)}, wantPrio: 0, wantPreempt: false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := PodGroupPriority(tc.pg, tc.members); got != tc.wantPrio {
				t.Errorf("priority = %d, want %d", got, tc.wantPrio)
			}
			if got := MayPreempt(tc.pg, tc.members); got != tc.wantPreempt {
				t.Errorf("mayPreempt = %v, want %v", got, tc.wantPreempt)
			}
		})
	}
}

func pgWith(prio *int32, policy *schedulingv1beta1.PreemptionPolicy) *schedulingv1beta1.PodGroup {
	return &schedulingv1beta1.PodGroup{Spec: schedulingv1beta1.PodGroupSpec{Priority: prio, PreemptionPolicy: policy}}
}
