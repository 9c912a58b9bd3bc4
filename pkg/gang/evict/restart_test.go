package evict

import (
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/gpufabric/gpufabric/pkg/gang/vocab"
	"github.com/gpufabric/gpufabric/pkg/topology"
)

// TestDisruptionLog: only bound members of ours that a taint manager
// deletes are remembered, once per take.
func TestDisruptionLog(t *testing.T) {
	member := func(name, node, reason string, status v1.ConditionStatus) *v1.Pod {
		p := &v1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name},
			Spec: v1.PodSpec{SchedulerName: topology.SchedulerName, NodeName: node,
				SchedulingGroup: &v1.PodSchedulingGroup{PodGroupName: ptr.To("train")}},
		}
		if reason != "" {
			p.Status.Conditions = []v1.PodCondition{{Type: v1.DisruptionTarget, Status: status, Reason: reason}}
		}
		return p
	}
	foreign := member("x", "n1", reasonDeviceTaintManager, v1.ConditionTrue)
	foreign.Spec.SchedulerName = v1.DefaultSchedulerName
	single := member("y", "n1", reasonDeviceTaintManager, v1.ConditionTrue)
	single.Spec.SchedulingGroup = nil
	for _, tc := range []struct {
		name string
		pod  *v1.Pod
		want string
	}{
		{"device taint", member("train-0", "n1", reasonDeviceTaintManager, v1.ConditionTrue), "train-0 on n1 (DeletionByDeviceTaintManager)"},
		{"node taint", member("train-1", "n2", reasonNodeTaintManager, v1.ConditionTrue), "train-1 on n2 (DeletionByTaintManager)"},
		{"preempted", member("train-0", "n1", vocab.ReasonPreemptionByScheduler, v1.ConditionTrue), ""},
		{"evicted", member("train-0", "n1", "EvictionByEvictionAPI", v1.ConditionTrue), ""},
		{"condition false", member("train-0", "n1", reasonDeviceTaintManager, v1.ConditionFalse), ""},
		{"not bound", member("train-0", "", reasonDeviceTaintManager, v1.ConditionTrue), ""},
		{"no condition", member("train-0", "n1", "", v1.ConditionTrue), ""},
		{"another scheduler's", foreign, ""},
		{"no pod group", single, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var d Disruptions
			if noted := d.Note(tc.pod); noted != (tc.want != "") {
				t.Errorf("note = %v", noted)
			}
			key := vocab.PodGroupKey("ns", "train")
			if got := d.take(key).why; !strings.Contains(got, tc.want) || (got == "") != (tc.want == "") {
				t.Errorf("take = %q, want %q", got, tc.want)
			}
			if got := d.take(key).why; got != "" {
				t.Errorf("second take = %q, want nothing", got)
			}
			if tc.want == "" {
				return
			}
			// A restart that could not start puts its cause back, unless
			// a newer one came meanwhile.
			d.restore(key, disruption{why: tc.want})
			if got := d.take(key).why; got != tc.want {
				t.Errorf("take after restore = %q, want %q", got, tc.want)
			}
			d.Note(tc.pod)
			d.restore(key, disruption{why: "older"})
			if got := d.take(key).why; !strings.Contains(got, tc.want) {
				t.Errorf("restore overwrote a newer disruption: %q", got)
			}
		})
	}
}
