package trees

import (
	"context"
	"slices"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"

	"github.com/gpufabric/gpufabric/pkg/gang/assume"
	"github.com/gpufabric/gpufabric/pkg/gang/commit"
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
