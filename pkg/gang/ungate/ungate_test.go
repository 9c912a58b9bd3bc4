package ungate

import (
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpufabric/gpufabric/pkg/topology"
)

// member builds an unbound pod of gpufabric-scheduler ns/name with gates
// and the PodScheduled reason given ("" for no condition).
func member(name string, gates int, reason string) *v1.Pod {
	p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}, Spec: v1.PodSpec{SchedulerName: topology.SchedulerName}}
	for i := range gates {
		p.Spec.SchedulingGates = append(p.Spec.SchedulingGates, v1.PodSchedulingGate{Name: "example.com/gate-" + string(rune('a'+i))})
	}
	if reason != "" {
		p.Status.Conditions = []v1.PodCondition{{Type: v1.PodScheduled, Status: v1.ConditionFalse, Reason: reason}}
	}
	return p
}

// gangOf keys pods by the name's prefix before "-" ("a-0" → "a").
func gangOf(p *v1.Pod) string {
	for i, c := range p.Name {
		if c == '-' {
			return p.Name[:i]
		}
	}
	return p.Name
}

// TestNote: a member is noted when an update removes its last gate, or
// when it is first seen without gates while its condition still says
// SchedulingGated (its gates went while no leader watched); not for a
// gate of two removed, an update without gates before and after, a
// bound pod, another scheduler's pod, a deleting pod, or a pod first seen
// without gates and tried since.
func TestNote(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	bound := member("p", 0, "")
	bound.Spec.NodeName = "n"
	other := member("p", 0, "")
	other.Spec.SchedulerName = "default-scheduler"
	deleting := member("p", 0, "")
	deleting.DeletionTimestamp = &metav1.Time{Time: at}
	for _, tc := range []struct {
		name     string
		old, pod *v1.Pod // old nil: an add
		want     bool
	}{
		{"last gate removed", member("p", 1, v1.PodReasonSchedulingGated), member("p", 0, v1.PodReasonSchedulingGated), true},
		{"one gate of two removed", member("p", 2, ""), member("p", 1, ""), false},
		{"never gated", member("p", 0, ""), member("p", 0, v1.PodReasonUnschedulable), false},
		{"bound while ungated", member("p", 1, ""), bound, false},
		{"another scheduler's pod", member("p", 1, ""), other, false},
		{"deleting", member("p", 1, ""), deleting, false},
		{"added ungated, still marked gated", nil, member("p", 0, v1.PodReasonSchedulingGated), true},
		{"added ungated, tried since", nil, member("p", 0, v1.PodReasonUnschedulable), false},
		{"added without condition", nil, member("p", 0, ""), false},
		{"added gated", nil, member("p", 1, v1.PodReasonSchedulingGated), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := Times{KeyOf: gangOf, Now: func() time.Time { return at }}
			if tc.old == nil {
				u.Added(tc.pod)
			} else {
				u.Updated(tc.old, tc.pod)
			}
			got := u.Take("p")
			if want := map[bool]time.Time{true: at}[tc.want]; !got.Equal(want) {
				t.Errorf("noted %v, want %v", got, want)
			}
			if u.Len() != 0 {
				t.Errorf("%d entries left after Take", u.Len())
			}
		})
	}
}

// TestLatestMember: a gang keeps the latest time of its members (an
// earlier clock never moves it back); Take forgets, Forget drops.
func TestLatestMember(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	u := Times{KeyOf: gangOf, Now: func() time.Time { return now }}
	u.Updated(member("a-0", 1, ""), member("a-0", 0, ""))
	now = now.Add(time.Minute)
	latest := now
	u.Updated(member("a-1", 1, ""), member("a-1", 0, ""))
	u.Updated(member("b-0", 1, ""), member("b-0", 0, ""))
	now = now.Add(-time.Hour)
	u.Updated(member("a-2", 1, ""), member("a-2", 0, ""))
	if u.Len() != 2 {
		t.Errorf("%d gangs, want 2: one entry per gang", u.Len())
	}
	if got := u.Take("a"); !got.Equal(latest) {
		t.Errorf("Take(a) = %v, want the latest member's %v", got, latest)
	}
	if got := u.Take("a"); !got.IsZero() {
		t.Errorf("second Take(a) = %v, want zero", got)
	}
	u.Forget("b")
	if u.Len() != 0 {
		t.Errorf("%d gangs after Forget, want 0", u.Len())
	}
}

// TestLater: the zero time is the earliest.
func TestLater(t *testing.T) {
	a := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	if Later(a, time.Time{}) != a || Later(time.Time{}, a) != a || Later(a, a.Add(time.Second)) != a.Add(time.Second) {
		t.Error("Later does not pick the later time")
	}
}
