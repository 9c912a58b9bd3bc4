package evict

import (
	"context"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	schedulingv1alpha3 "k8s.io/api/scheduling/v1alpha3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpufabric/gpufabric/pkg/gang/placement"
	"github.com/gpufabric/gpufabric/pkg/gang/placement/index"
	"github.com/gpufabric/gpufabric/pkg/gang/preemption"
	"github.com/gpufabric/gpufabric/pkg/gang/vocab"
)

// gangAsTree places a gang as a tree's placer would place the tree (the
// evict room sees only a preemption.Placer).
type gangAsTree struct{ g *placement.Gang }

func (p gangAsTree) Place(ctx context.Context, cfg placement.Config, s *index.Snapshot) (*placement.Decision, string, error) {
	d, _, err := placement.Place(ctx, cfg, s, p.g)
	return d, "", err
}

// retries records RetryAfter.
type retries map[string]time.Duration

func (r retries) RetryAfter(key string, after time.Duration) { r[key] = after }

// TestStarvingTreeReserves: a CompositePodGroup tree refused past the
// starvation bound (its waiting members unschedulable for an hour) holds
// the domain closest to fitting it, as a gang does: other gangs of its
// priority or lower do not see those nodes, the tree does; once it is
// placed (GangDone) the domain is free again. A tree refused for less
// than the bound holds nothing.
func TestStarvingTreeReserves(t *testing.T) {
	w := newStarvingWorld(t, 1)
	queued := retries{}
	w.e.cfg.Queue = queued
	tree := func(name string, refused time.Duration) (*Attempt, preemption.Request) {
		root := &schedulingv1alpha3.CompositePodGroup{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: name,
			CreationTimestamp: metav1.NewTime(time.Now().Add(-2 * time.Hour))}}
		p := &v1.Pod{Status: v1.PodStatus{Conditions: []v1.PodCondition{{Type: v1.PodScheduled, Status: v1.ConditionFalse,
			LastTransitionTime: metav1.NewTime(time.Now().Add(-refused))}}}}
		a := &Attempt{Key: vocab.CompositeKey("team-a", name), Root: root, Members: []*v1.Pod{p, {}}}
		return a, preemption.Request{Tree: &preemption.Tree{Namespace: "team-a", Placer: gangAsTree{w.gang}, Devices: preemption.GangDevices(w.gang)}}
	}
	refuse := func(a *Attempt, req preemption.Request) string {
		msg, err := w.e.afterRefusal(t.Context(), a, req, preemption.WithoutNodes(w.input, w.e.Held(a)))
		if err != nil {
			t.Fatal(err)
		}
		return msg
	}
	fresh, freq := tree("fresh", time.Second)
	if msg := refuse(fresh, freq); strings.Contains(msg, "holding") {
		t.Errorf("a tree refused for a second: %q", msg)
	}
	if d := queued[fresh.Key]; d < 58*time.Second || d > time.Minute {
		t.Errorf("the fresh tree is looked at again in %s, want when the bound of a minute passes", d)
	}
	a, req := tree("job", time.Hour)
	msg := refuse(a, req)
	if !strings.Contains(msg, "holding gpufabric.dev/nvlinkDomain") || !strings.Contains(msg, "for this gang (waited 1h") {
		t.Fatalf("the starving tree's refusal: %q", msg)
	}
	other := w.attempt("team-b", "small")
	if held := w.e.Held(other); held.Len() != 2 {
		t.Errorf("another gang sees %d nodes held, want the reserved domain's 2", held.Len())
	}
	if held := w.e.Held(a); held.Len() != 0 {
		t.Errorf("the tree sees its own domain held: %v", held)
	}
	if err := w.e.GangDone(t.Context(), a.Key); err != nil {
		t.Fatal(err)
	}
	if held := w.e.Held(other); held.Len() != 0 {
		t.Errorf("after the tree was placed %d nodes are still held", held.Len())
	}
}
