package preemption

import (
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func TestPriorityResolution(t *testing.T) {
	pod := func(prio *int32, policy *v1.PreemptionPolicy) *v1.Pod {
		return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "m"}, Spec: v1.PodSpec{Priority: prio, PreemptionPolicy: policy}}
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
		// The members' Never was set by admission from their class: the
		// group's own policy does not lift it (a guard beyond upstream).
		{name: "a member's Never holds over the group's policy", pg: pgWith(nil, ptr.To(schedulingv1beta1.PreemptLowerPriority)),
			members: []*v1.Pod{pod(nil, never)}, wantPrio: 0, wantPreempt: false},
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

// TestResolve: a gang never ranks above its class's value nor above the
// lowest priority its pods were admitted with, and a Never on the
// PodGroup, its class or a member means no preemption; each cap and each
// refusal says why.
func TestResolve(t *testing.T) {
	pod := func(name string, prio int32, policy *v1.PreemptionPolicy) *v1.Pod {
		return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1.PodSpec{Priority: &prio, PreemptionPolicy: policy}}
	}
	class := func(name string, value int32, policy *v1.PreemptionPolicy) *schedulingv1.PriorityClass {
		return &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Value: value, PreemptionPolicy: policy}
	}
	never, lower := ptr.To(v1.PreemptNever), ptr.To(v1.PreemptLowerPriority)
	for _, tc := range []struct {
		name       string
		pg         *schedulingv1beta1.PodGroup
		class      *schedulingv1.PriorityClass
		members    []*v1.Pod
		want       int32
		wantCapped string // substring; "" = not capped
		wantNever  string // substring; "" = may preempt
	}{
		{name: "class and pods agree", pg: pgWith(ptr.To[int32](1000), nil), class: class("high", 1000, lower),
			members: []*v1.Pod{pod("a", 1000, lower), pod("b", 1000, lower)}, want: 1000},
		{name: "the class says Never (gate off: the group's field is unset)", pg: pgWith(ptr.To[int32](1000), nil),
			class: class("high-never", 1000, never), members: []*v1.Pod{pod("a", 1000, lower)}, want: 1000,
			wantNever: "PriorityClass high-never has preemptionPolicy Never"},
		{name: "quota kept the class off the pods: capped at the pods' priority", pg: pgWith(ptr.To[int32](1000), nil),
			class: class("high", 1000, lower), members: []*v1.Pod{pod("a", 0, lower), pod("b", 0, lower)}, want: 0,
			wantCapped: "priority capped at 0 (the PodGroup asks for 1000; its pods were admitted with priority 0 or lower)"},
		{name: "the lowest member caps", pg: pgWith(ptr.To[int32](1000), nil),
			members: []*v1.Pod{pod("a", 500, nil), pod("b", 100, nil)}, want: 100, wantCapped: "capped at 100"},
		{name: "spec.priority above its class's value (admission bypassed)", pg: pgWith(ptr.To[int32](5000), nil),
			class: class("high", 1000, nil), members: []*v1.Pod{pod("a", 2000, nil)}, want: 1000,
			wantCapped: "PriorityClass high has value 1000"},
		{name: "no members yet: the class still caps", pg: pgWith(ptr.To[int32](5000), nil),
			class: class("high", 1000, nil), want: 1000, wantCapped: "capped at 1000"},
		{name: "members above the group do not raise it", pg: pgWith(ptr.To[int32](100), nil),
			members: []*v1.Pod{pod("a", 1000, nil)}, want: 100},
		{name: "a member says Never", pg: pgWith(ptr.To[int32](100), nil),
			members: []*v1.Pod{pod("a", 100, nil), pod("worker-1", 100, never)}, want: 100,
			wantNever: "member worker-1 has preemptionPolicy Never"},
		{name: "the group says Never", pg: pgWith(ptr.To[int32](100), ptr.To(schedulingv1beta1.PreemptNever)),
			class: class("c", 100, lower), members: []*v1.Pod{pod("a", 100, nil)}, want: 100,
			wantNever: "the PodGroup's preemptionPolicy is Never"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := Resolve(tc.pg, tc.class, tc.members)
			if e.Priority != tc.want {
				t.Errorf("priority %d, want %d", e.Priority, tc.want)
			}
			if (tc.wantCapped == "") != (e.Capped == "") || !strings.Contains(e.Capped, tc.wantCapped) {
				t.Errorf("capped %q, want %q", e.Capped, tc.wantCapped)
			}
			if (tc.wantNever == "") != (e.NoPreemption == "") || !strings.Contains(e.NoPreemption, tc.wantNever) {
				t.Errorf("no preemption %q, want %q", e.NoPreemption, tc.wantNever)
			}
		})
	}
	if e := ResolvePod(pod("p", 7, never)); e.Priority != 7 || e.NoPreemption == "" {
		t.Errorf("pod: %+v, want priority 7 and no preemption", e)
	}
}

func pgWith(prio *int32, policy *schedulingv1beta1.PreemptionPolicy) *schedulingv1beta1.PodGroup {
	return &schedulingv1beta1.PodGroup{Spec: schedulingv1beta1.PodGroupSpec{Priority: prio, PreemptionPolicy: policy}}
}
