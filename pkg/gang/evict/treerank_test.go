package evict

import (
	"testing"

	schedulingv1alpha3 "k8s.io/api/scheduling/v1alpha3"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
)

// TestTreeRankCapped: a tree ranks in the queue at its effective
// priority, as its preemption values it: a root asking for 1000 whose
// leaves' pods were admitted at 0 ranks 0 (before, the root's own
// spec.priority put a tenant's tree ahead of everyone's gangs); one whose
// pods run at 1000 ranks 1000. The rank is remembered: the leaves are not
// read again within the TTL.
func TestTreeRankCapped(t *testing.T) {
	w := newPriorityWorld()
	quota := w.group("quota-leaf", "high", 2, 0)
	fine := w.group("fine-leaf", "high", 2, 1000)
	p := NewPriorities(w.config(t, events.NewFakeRecorder(10)))
	root := func(name string) *schedulingv1alpha3.CompositePodGroup {
		return &schedulingv1alpha3.CompositePodGroup{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name)},
			Spec: schedulingv1alpha3.CompositePodGroupSpec{PriorityClassName: "high", Priority: ptr.To[int32](1000)}}
	}
	reads := 0
	leavesOf := func(pg *schedulingv1beta1.PodGroup) func() []*schedulingv1beta1.PodGroup {
		return func() []*schedulingv1beta1.PodGroup { reads++; return []*schedulingv1beta1.PodGroup{pg} }
	}
	if got := p.TreeRank(root("quota"), leavesOf(quota)); got != 0 {
		t.Errorf("a tree whose pods were admitted at 0 ranks %d, want 0", got)
	}
	if got := p.TreeRank(root("fine"), leavesOf(fine)); got != 1000 {
		t.Errorf("a tree whose pods run at 1000 ranks %d, want 1000", got)
	}
	if got := p.TreeRank(root("quota"), leavesOf(quota)); got != 0 || reads != 2 {
		t.Errorf("again: rank %d after %d reads of the leaves, want 0 after 2 (remembered)", got, reads)
	}
}
