package trees

import (
	"context"
	"slices"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpufabric/gpufabric/pkg/gang/assume"
	"github.com/gpufabric/gpufabric/pkg/gang/commit"
	"github.com/gpufabric/gpufabric/pkg/gang/placement"
	"github.com/gpufabric/gpufabric/pkg/gang/vocab"
)

// TestWholeAbove: a leaf restarts with the highest composite above it
// whose disruptionMode is All; its own mode All, or none, is no
// composite's restart; LeavesUnder lists that composite's leaves.
func TestWholeAbove(t *testing.T) {
	w := newWorld()
	w.composite("job", "", "wl", 1)
	w.composite("replica", "job", "wl", 1)
	workers := w.podGroup("workers", "replica", "wl", 1)
	frontend := w.podGroup("frontend", "job", "wl", 1)
	w.allOn("workers")
	if got := w.reader().WholeAbove(workers); got != "" {
		t.Errorf("its own mode All: %q, want no composite", got)
	}
	w.allOn("replica")
	r := w.reader()
	if got, want := r.WholeAbove(workers), vocab.CompositeKey("ns", "replica"); got != want {
		t.Errorf("under replica: %q, want %q", got, want)
	}
	if got := r.WholeAbove(frontend); got != "" {
		t.Errorf("frontend: %q, want none (replica is not above it)", got)
	}
	leaves, err := r.LeavesUnder(vocab.CompositeKey("ns", "replica"))
	if err != nil || len(leaves) != 1 || leaves[0].Name != "workers" {
		t.Errorf("leaves under replica: %v %v", leaves, err)
	}
	if _, err := r.LeavesUnder(vocab.CompositeKey("ns", "gone")); err == nil {
		t.Error("a composite that is gone: no error")
	}
}

// fakeQueue records RetryAfter; the rest does nothing.
type fakeQueue struct{ retried []string }

func (q *fakeQueue) Cycle() uint64                                    { return 1 }
func (q *fakeQueue) Add(string)                                       {}
func (q *fakeQueue) Done(string)                                      {}
func (q *fakeQueue) FlushParked()                                     {}
func (q *fakeQueue) Park(string, uint64) time.Duration                { return 0 }
func (q *fakeQueue) ParkError(string, uint64) time.Duration           { return 0 }
func (q *fakeQueue) Wait(string, string, uint64)                      {}
func (q *fakeQueue) RetryAfter(key string, _ time.Duration)           { q.retried = append(q.retried, key) }
func (q *fakeQueue) RetryConflict(string) time.Duration               { return 0 }
func (q *fakeQueue) ParkShort(key string, cycle uint64) time.Duration { return 0 }

// TestRunWaitsForRestartingLeaf: while a leaf's old members go (a whole
// restart), its tree's attempt places nothing and looks again soon.
func TestRunWaitsForRestartingLeaf(t *testing.T) {
	w := newWorld()
	w.composite("job", "", "wl", 1)
	w.podGroup("prefill", "job", "wl", 1)
	w.podGroup("decode", "job", "wl", 1)
	q := &fakeQueue{}
	var placed bool
	c := NewCycle(Deps{Reader: w.reader(), Lister: w.Get, Queue: q, Assumed: assume.New(), Visible: func(*assume.Entry) bool { return true },
		Commits: commit.New(commit.Config{}),
		Members: func(pg *schedulingv1beta1.PodGroup) (Members, error) {
			return Members{Restarting: pg.Name == "decode"}, nil
		},
		Forget:  func(string) { placed = true },
		SetPods: func(context.Context, []*v1.Pod, string, string) {},
	})
	key := vocab.CompositeKey("ns", "job")
	if _, err := c.Run(t.Context(), key); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(q.retried, []string{key}) || placed {
		t.Errorf("retried %v, forgotten %v: want one retry, nothing else", q.retried, placed)
	}
}

// TestRestartedLeafPinned: a leaf restarted whole is pinned to its
// previous domain (its spares open to it) while a placed leaf keeps its
// running members' nodes; when the tree does not fit so, unpin frees the
// leaves whose policy lets them go and names those it keeps.
func TestRestartedLeafPinned(t *testing.T) {
	w := newWorld()
	pod := func(name string) *v1.Pod {
		return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name)}}
	}
	c := NewCycle(Deps{Prepare: func(context.Context, *placement.Gang) error { return nil }})
	leaf := func(name string, ms Members) *leafState {
		l := &leafState{pg: w.podGroup(name, "job", "wl", 1), ms: ms}
		if _, err := c.leafGang(t.Context(), l); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return l
	}
	free := leaf("free", Members{Pending: []*v1.Pod{pod("free-0")}, Previous: []string{"n1", "n2"}})
	stays := leaf("stays", Members{Pending: []*v1.Pod{pod("stays-0")}, Previous: []string{"n3"}, Stays: "policy Wait: it waits"})
	late := leaf("late", Members{Pending: []*v1.Pod{pod("late-1")}, AnyBound: true, BoundNodes: []string{"n4"}, Previous: []string{"n5"}})
	if g := free.gang; !slices.Equal(g.BoundNodes, []string{"n1", "n2"}) || !slices.Equal(g.PreviousNodes, g.BoundNodes) {
		t.Fatalf("restarted leaf: bound %v, previous %v; want its previous domain's nodes in both", g.BoundNodes, g.PreviousNodes)
	}
	if g := late.gang; !slices.Equal(g.BoundNodes, []string{"n4"}) || g.PreviousNodes != nil {
		t.Fatalf("placed leaf: bound %v, previous %v; want its running members' nodes only", g.BoundNodes, g.PreviousNodes)
	}
	a := &attempt{leaves: map[types.UID]*leafState{free.pg.UID: free, stays.pg.UID: stays, late.pg.UID: late}}
	again, why := a.unpin()
	if !again || why != "PodGroup stays: policy Wait: it waits" {
		t.Errorf("unpin = %v, %q", again, why)
	}
	if free.gang.BoundNodes != nil || !slices.Equal(free.gang.PreviousNodes, []string{"n1", "n2"}) {
		t.Errorf("freed leaf: bound %v, previous %v; want unpinned, its spares still open", free.gang.BoundNodes, free.gang.PreviousNodes)
	}
	if !slices.Equal(stays.gang.BoundNodes, []string{"n3"}) || !slices.Equal(late.gang.BoundNodes, []string{"n4"}) {
		t.Errorf("kept: stays %v, late %v", stays.gang.BoundNodes, late.gang.BoundNodes)
	}
	if again, _ := a.unpin(); again {
		t.Error("a second unpin freed a leaf again")
	}
}
