package grouper

import (
	"fmt"
	"strings"
	"testing"

	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/gpufabric/gpufabric/pkg/workloads/grouping"
)

// TestSeen: a message is new once per key until it changes; forget makes
// it new again; past the bound the oldest keys are forgotten, so memory
// stays bounded whatever the number of workloads.
func TestSeen(t *testing.T) {
	s := newSeen(3)
	steps := []struct {
		key, msg string
		want     bool
	}{
		{"a", "x", true}, {"a", "x", false}, {"a", "y", true}, {"b", "x", true}, {"c", "x", true},
		{"a", "y", false}, // a was used last: b is the oldest now
		{"d", "x", true},  // evicts b
		{"b", "x", true},  // b was forgotten
		{"a", "y", false},
	}
	for i, st := range steps {
		if got := s.changed(st.key, st.msg); got != st.want {
			t.Errorf("step %d changed(%q, %q) = %v, want %v", i, st.key, st.msg, got, st.want)
		}
	}
	if len(s.items) > 3 || s.order.Len() > 3 {
		t.Errorf("%d items remembered, bound 3", len(s.items))
	}
	s.forget("a")
	if !s.changed("a", "y") {
		t.Error("a forgotten message is not new")
	}
	big := newSeen(100)
	for i := range 10000 {
		big.changed(fmt.Sprint(i), "m")
	}
	if len(big.items) != 100 {
		t.Errorf("%d remembered, bound 100", len(big.items))
	}
}

// TestSpecChanged: status-only updates do not queue a workload; spec
// (generation), annotation, owner and deletion changes do; objects without
// a generation queue on every change.
func TestSpecChanged(t *testing.T) {
	base := &metav1.ObjectMeta{Name: "w", Generation: 3, ResourceVersion: "10", Annotations: map[string]string{"a": "1"}}
	mod := func(f func(m *metav1.ObjectMeta)) *metav1.ObjectMeta {
		m := base.DeepCopy()
		m.ResourceVersion = "11"
		f(m)
		return m
	}
	now := metav1.Now()
	cases := []struct {
		name string
		new  *metav1.ObjectMeta
		old  *metav1.ObjectMeta
		want bool
	}{
		{"status only", mod(func(*metav1.ObjectMeta) {}), base, false},
		{"spec", mod(func(m *metav1.ObjectMeta) { m.Generation = 4 }), base, true},
		{"annotation", mod(func(m *metav1.ObjectMeta) { m.Annotations["a"] = "2" }), base, true},
		{"annotation added", mod(func(m *metav1.ObjectMeta) { m.Annotations["b"] = "" }), base, true},
		{"owner", mod(func(m *metav1.ObjectMeta) { m.OwnerReferences = []metav1.OwnerReference{{UID: "u"}} }), base, true},
		{"deleting", mod(func(m *metav1.ObjectMeta) { m.DeletionTimestamp = &now }), base, true},
		{"no generation", mod(func(m *metav1.ObjectMeta) { m.Generation = 0 }), func() *metav1.ObjectMeta { m := base.DeepCopy(); m.Generation = 0; return m }(), true},
	}
	for _, tc := range cases {
		if got := specChanged(tc.old, tc.new); got != tc.want {
			t.Errorf("%s: specChanged = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestImmutableDiff names exactly the immutable fields that differ, with
// the annotation that sets each.
func TestImmutableDiff(t *testing.T) {
	pg := func(key string, claim string, all bool, class string) *schedulingv1beta1.PodGroup {
		p := &schedulingv1beta1.PodGroup{Spec: schedulingv1beta1.PodGroupSpec{PriorityClassName: class}}
		if key != "" {
			p.Spec.SchedulingConstraints = &schedulingv1beta1.PodGroupSchedulingConstraints{Topology: []schedulingv1beta1.TopologyConstraint{{Key: key}}}
		}
		if claim != "" {
			p.Spec.ResourceClaims = []schedulingv1beta1.PodGroupResourceClaim{{Name: claim, ResourceClaimTemplateName: ptr.To(claim)}}
		}
		if all {
			p.Spec.DisruptionMode = &schedulingv1beta1.DisruptionMode{All: &schedulingv1beta1.AllDisruptionMode{}}
		}
		return p
	}
	have := pg("rack", "fabric", false, "high")
	if got := immutableDiff(have, pg("rack", "fabric", false, "high")); len(got) != 0 {
		t.Errorf("equal: %v", got)
	}
	got := strings.Join(immutableDiff(have, pg("leaf", "", true, "low")), "; ")
	for _, want := range []string{grouping.AnnotationTopologyKey, grouping.AnnotationGroupClaims, grouping.AnnotationDisruptionMode, "priorityClassName"} {
		if !strings.Contains(got, want) {
			t.Errorf("diff %q lacks %s", got, want)
		}
	}
}
