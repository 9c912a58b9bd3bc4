package scheduler

import (
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpufabric/gpufabric/pkg/gang/vocab"
)

// podGroupAt builds a PodGroup created at created, with the
// InitiallyScheduled condition in status placed ("" for none).
func podGroupAt(created time.Time, placed metav1.ConditionStatus) *schedulingv1beta1.PodGroup {
	pg := &schedulingv1beta1.PodGroup{ObjectMeta: metav1.ObjectMeta{Name: "pg", Namespace: "ns", CreationTimestamp: metav1.NewTime(created)}}
	if placed != "" {
		pg.Status.Conditions = []metav1.Condition{{Type: vocab.ConditionInitiallyScheduled, Status: placed, Reason: vocab.ReasonScheduled}}
	}
	return pg
}

// TestGangWaitSince: gang_wait_seconds is observed once per placement,
// from the PodGroup's creation (the pod's for a gang of one): not for a
// commit of late members of a gang already placed, again for a gang
// whose condition was reset (restarted).
func TestGangWaitSince(t *testing.T) {
	created := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", CreationTimestamp: metav1.NewTime(created.Add(time.Minute))}}
	for _, tc := range []struct {
		name      string
		a         *attempt
		wantSince time.Time
		wantOK    bool
	}{
		{"first placement", &attempt{pg: podGroupAt(created, "")}, created, true},
		{"late members of a placed gang", &attempt{pg: podGroupAt(created, metav1.ConditionTrue)}, time.Time{}, false},
		{"restarted gang", &attempt{pg: podGroupAt(created, metav1.ConditionFalse)}, created, true},
		{"gang of one", &attempt{pod: pod}, created.Add(time.Minute), true},
		{"neither", &attempt{}, time.Time{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			since, ok := gangWaitSince(tc.a)
			if ok != tc.wantOK || !since.Equal(tc.wantSince) {
				t.Errorf("gangWaitSince = %v, %t; want %v, %t", since, ok, tc.wantSince, tc.wantOK)
			}
		})
	}
}
