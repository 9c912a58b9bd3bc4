package trees

import (
	"errors"
	"slices"
	"strings"
	"testing"

	schedulingv1alpha3 "k8s.io/api/scheduling/v1alpha3"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"

	"github.com/gpufabric/gpufabric/pkg/gang/vocab"
)

// allOn gives the named composites and PodGroups of w disruptionMode All.
func (w *world) allOn(names ...string) {
	for _, c := range w.composites {
		if slices.Contains(names, c.Name) {
			c.Spec.DisruptionMode = &schedulingv1alpha3.CompositeDisruptionMode{All: &schedulingv1alpha3.AllCompositeDisruptionMode{}}
		}
	}
	for _, o := range w.pIdx.List() {
		if pg := o.(*schedulingv1beta1.PodGroup); slices.Contains(names, pg.Name) {
			pg.Spec.DisruptionMode = &schedulingv1beta1.DisruptionMode{All: &schedulingv1beta1.AllDisruptionMode{}}
		}
	}
}

// TestAbove: a leaf's victim unit is the highest group at or above it
// with disruptionMode All, at each level, as kube-scheduler 1.37 finds
// it; the walk ends at a missing parent (the last composite found stands
// for the root) and refuses a cycle or a chain deeper than a tree.
func TestAbove(t *testing.T) {
	// job (root) > replica > leaf "workers"; "frontend" right under job.
	build := func() (*world, *schedulingv1beta1.PodGroup, *schedulingv1beta1.PodGroup) {
		w := newWorld()
		w.composite("job", "", "wl", 1)
		w.composite("replica", "job", "wl", 1)
		return w, w.podGroup("workers", "replica", "wl", 1), w.podGroup("frontend", "job", "wl", 1)
	}
	for _, tc := range []struct {
		name                   string
		all                    []string
		wantWorkers, wantFront string
	}{
		{name: "single everywhere: pods one by one"},
		{name: "all on the root: the whole tree", all: []string{"job"},
			wantWorkers: vocab.CompositeKey("ns", "job"), wantFront: vocab.CompositeKey("ns", "job")},
		{name: "all on a middle composite: its subtree", all: []string{"replica"},
			wantWorkers: vocab.CompositeKey("ns", "replica")},
		{name: "all on a leaf: that PodGroup", all: []string{"workers"}, wantWorkers: vocab.PodGroupKey("ns", "workers")},
		{name: "single on a parent does not shield an all child, the highest all wins", all: []string{"workers", "replica"},
			wantWorkers: vocab.CompositeKey("ns", "replica")},
		{name: "all on the root and a leaf: the root", all: []string{"workers", "job"},
			wantWorkers: vocab.CompositeKey("ns", "job"), wantFront: vocab.CompositeKey("ns", "job")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w, workers, frontend := build()
			w.allOn(tc.all...)
			for _, c := range []struct {
				pg   *schedulingv1beta1.PodGroup
				want string
			}{{workers, tc.wantWorkers}, {frontend, tc.wantFront}} {
				all, top, err := w.reader().Above(c.pg)
				if err != nil || all != c.want || top == nil || top.Name != "job" {
					t.Errorf("%s: all %q, top %v, err %v; want %q under job", c.pg.Name, all, top, err, c.want)
				}
			}
		})
	}

	t.Run("a missing parent ends the walk", func(t *testing.T) {
		w := newWorld()
		w.composite("replica", "gone", "wl", 1)
		w.allOn("replica")
		all, top, err := w.reader().Above(w.podGroup("workers", "replica", "wl", 1))
		if err != nil || all != vocab.CompositeKey("ns", "replica") || top == nil || top.Name != "replica" {
			t.Errorf("all %q top %v err %v: want replica standing for the root", all, top, err)
		}
		if _, top, err := w.reader().Above(w.podGroup("orphan", "gone", "wl", 1)); top != nil || err != nil {
			t.Errorf("parent missing: top %v err %v, want none", top, err)
		}
	})
	t.Run("a cycle, a chain too deep", func(t *testing.T) {
		w := newWorld()
		w.composite("a", "b", "wl", 1)
		w.composite("b", "a", "wl", 1)
		if _, _, err := w.reader().Above(w.podGroup("p", "a", "wl", 1)); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "cycle") {
			t.Errorf("cycle: %v", err)
		}
		w = newWorld()
		w.composite("l1", "", "wl", 1)
		w.composite("l2", "l1", "wl", 1)
		w.composite("l3", "l2", "wl", 1)
		w.composite("l4", "l3", "wl", 1)
		if _, _, err := w.reader().Above(w.podGroup("p", "l3", "wl", 1)); err != nil {
			t.Errorf("three composites above a PodGroup are a tree: %v", err)
		}
		if _, _, err := w.reader().Above(w.podGroup("q", "l4", "wl", 1)); !errors.Is(err, ErrInvalid) {
			t.Errorf("four composites above: %v, want ErrInvalid", err)
		}
	})
}

// TestLeaves: the leaf PodGroups under a composite, its subtree only;
// past a tree's bounds an error.
func TestLeaves(t *testing.T) {
	w := newWorld()
	job := w.composite("job", "", "wl", 1)
	replica := w.composite("replica", "job", "wl", 1)
	w.podGroup("workers", "replica", "wl", 1)
	w.podGroup("leader", "replica", "other-workload", 1) // a victim's tree is evicted as it stands
	w.podGroup("frontend", "job", "wl", 1)
	names := func(c *schedulingv1alpha3.CompositePodGroup) string {
		pgs, err := w.reader().Leaves(c)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, pg := range pgs {
			out = append(out, pg.Name)
		}
		slices.Sort(out)
		return strings.Join(out, ",")
	}
	if got := names(job); got != "frontend,leader,workers" {
		t.Errorf("leaves of job %s", got)
	}
	if got := names(replica); got != "leader,workers" {
		t.Errorf("leaves of replica %s", got)
	}
	wide := newWorld()
	r := wide.composite("r", "", "wl", 1)
	for i := range 9 {
		c := wide.composite("c"+string(rune('a'+i)), "r", "wl", 1)
		for j := range 60 {
			wide.podGroup(c.Name+"-"+string(rune('a'+j%26))+string(rune('a'+j/26)), c.Name, "wl", 1)
		}
	}
	if _, err := wide.reader().Leaves(r); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "more than 512 PodGroups") {
		t.Errorf("540 leaves: %v, want ErrInvalid", err)
	}
}
