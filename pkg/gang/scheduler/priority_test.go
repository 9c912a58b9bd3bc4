package scheduler

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	"k8s.io/utils/ptr"
)

func TestQueueServesByPriorityThenAge(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ranks := map[string]rank{
		"pg:ns/old-low":  {priority: 0, since: t0},
		"pg:ns/new-low":  {priority: 0, since: t0.Add(time.Minute)},
		"pg:ns/new-high": {priority: 1000, since: t0.Add(2 * time.Minute)},
		"pg:ns/old-high": {priority: 1000, since: t0.Add(-time.Minute)},
		"pod:ns/neg":     {priority: -5, since: t0.Add(-time.Hour)},
		"pg:ns/tie-b":    {priority: 10, since: t0},
		"pg:ns/tie-a":    {priority: 10, since: t0},
	}
	gq := newGangQueue(time.Millisecond, time.Millisecond, time.Hour)
	gq.order.setRank(func(k string) rank { return ranks[k] })
	for _, k := range []string{"pg:ns/old-low", "pod:ns/neg", "pg:ns/new-high", "pg:ns/tie-b", "pg:ns/new-low", "pg:ns/old-high", "pg:ns/tie-a"} {
		gq.add(k)
	}
	var got []string
	for range ranks {
		got = append(got, next(t, gq, time.Second))
	}
	want := []string{"pg:ns/old-high", "pg:ns/new-high", "pg:ns/tie-a", "pg:ns/tie-b", "pg:ns/old-low", "pg:ns/new-low", "pod:ns/neg"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("order (-want +got):\n%s", diff)
	}
}

func TestQueueReorderAfterRanksChange(t *testing.T) {
	ranks := map[string]rank{"pg:ns/a": {priority: 1}, "pg:ns/b": {priority: 2}}
	gq := newGangQueue(time.Millisecond, time.Millisecond, time.Hour)
	gq.order.setRank(func(k string) rank { return ranks[k] })
	gq.add("pg:ns/a")
	gq.add("pg:ns/b")
	// What the informers showed when the keys were queued was incomplete.
	ranks["pg:ns/a"] = rank{priority: 3}
	gq.order.reorder()
	if k := next(t, gq, time.Second); k != "pg:ns/a" {
		t.Fatalf("after reorder: got %q, want pg:ns/a", k)
	}
	// Touch (an event for a queued key) re-reads one key's rank.
	gq.add("pg:ns/c")
	ranks["pg:ns/c"] = rank{priority: 5}
	gq.add("pg:ns/c")
	if k := next(t, gq, time.Second); k != "pg:ns/c" {
		t.Fatalf("after touch: got %q, want pg:ns/c", k)
	}
}

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
			if got := podGroupPriority(tc.pg, tc.members); got != tc.wantPrio {
				t.Errorf("priority = %d, want %d", got, tc.wantPrio)
			}
			if got := mayPreempt(tc.pg, tc.members); got != tc.wantPreempt {
				t.Errorf("mayPreempt = %v, want %v", got, tc.wantPreempt)
			}
		})
	}
}

func pgWith(prio *int32, policy *schedulingv1beta1.PreemptionPolicy) *schedulingv1beta1.PodGroup {
	return &schedulingv1beta1.PodGroup{Spec: schedulingv1beta1.PodGroupSpec{Priority: prio, PreemptionPolicy: policy}}
}
