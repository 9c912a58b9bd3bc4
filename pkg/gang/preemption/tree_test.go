package preemption

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpufabric/gpufabric/pkg/gang/composite"
	"github.com/gpufabric/gpufabric/pkg/gang/placement"
	"github.com/gpufabric/gpufabric/pkg/gang/placement/index"
	"github.com/gpufabric/gpufabric/pkg/gang/placement/scenario"
	"github.com/gpufabric/gpufabric/pkg/topology"
)

// treePlacer places a composite.Group for a plan, every leaf's pods in one
// decision (what pkg/gang/trees hands the evict room).
type treePlacer struct{ root *composite.Group }

func (p treePlacer) Place(ctx context.Context, cfg placement.Config, s *index.Snapshot) (*placement.Decision, string, error) {
	d, u, err := composite.Place(ctx, cfg, s, p.root, composite.Options{})
	if err != nil || d == nil {
		if u != nil {
			return nil, u.Message, err
		}
		return nil, "", err
	}
	out := &placement.Decision{Gang: p.root.Name}
	for _, l := range d.Leaves {
		out.Pods = append(out.Pods, l.Decision.Pods...)
	}
	return out, "", nil
}

// rackWorld is two racks of two NVLink domains of two 4-GPU nodes: r0
// (a, b) and r1 (c, d), with running workloads added by the tests.
func rackWorld(t *testing.T) *world {
	t.Helper()
	var domains []scenario.DomainSpec
	for _, d := range []struct{ id, rack string }{{"a", "r0"}, {"b", "r0"}, {"c", "r1"}, {"d", "r1"}} {
		domains = append(domains, scenario.DomainSpec{ID: d.id, Nodes: 2, GPUsPerNode: 4, Labels: map[string]string{"rack": d.rack}})
	}
	b, err := scenario.Build(scenario.Scenario{Levels: []string{"rack"}, Domains: domains})
	if err != nil {
		t.Fatal(err)
	}
	b.Config.Index.AllocateTimeout = time.Minute // a loaded machine must not turn a slow call into a refusal
	return &world{built: b}
}

// leafSpec is a leaf of the test trees: pods of 4 GPUs in one NVLink
// domain, or members running on nodes (no pods waiting).
type leafSpec struct {
	name    string
	pods    int
	running []string
}

// tree is a root composite with key rack over leaves, minGroupCount all.
func tree(t *testing.T, leaves ...leafSpec) *composite.Group {
	t.Helper()
	root := &composite.Group{Name: "CompositePodGroup/job", TopologyKey: "rack", MinGroupCount: len(leaves)}
	for _, l := range leaves {
		g, _, err := scenario.BuildGang(scenario.GangSpec{Name: l.name, Pods: l.pods, GPUsPerPod: 4,
			TopologyKey: topology.TopologyKeyNVLinkDomain, BoundNodes: l.running})
		if err != nil {
			t.Fatal(err)
		}
		root.Children = append(root.Children, &composite.Group{Name: "PodGroup/" + l.name, TopologyKey: topology.TopologyKeyNVLinkDomain, Gang: g})
	}
	return root
}

// own adds a pod of the tree itself running on node (not a victim: it is
// of the tree's priority).
func (w *world) own(name, node string) {
	w.built.Input.Pods = append(w.built.Input.Pods, scenario.BoundPod(name, node, "1", "1Gi"))
	c := scenario.AllocatedClaim(name, node, topology.GPUDeviceName(0), topology.GPUDeviceName(1), topology.GPUDeviceName(2), topology.GPUDeviceName(3))
	c.UID = types.UID("claim-" + name)
	w.built.Input.ResourceClaims = append(w.built.Input.ResourceClaims, c)
}

// TestEvaluateTree: a CompositePodGroup tree plans as a gang does, in the
// domains of its root's level, with the tree search placing it: the rack
// whose victims matter least, only the victims it needs, a running
// subtree's rack whatever it costs, and no plan when even an empty rack
// is too small.
func TestEvaluateTree(t *testing.T) {
	tests := []struct {
		name  string
		tree  []leafSpec
		setup func(w *world)
		// want: the rack and victims; "" : no plan, whyHas in the reason.
		wantRack    string
		wantVictims []string
		whyHas      string
	}{{
		name: "the rack of the least important victims",
		tree: []leafSpec{{name: "enc", pods: 2}, {name: "dec", pods: 2}},
		setup: func(w *world) {
			for _, d := range []string{"a", "b"} {
				w.run("pg:ns/low-"+d, 10, true, time.Hour, full(n(d, 0)), full(n(d, 1)))
			}
			for _, d := range []string{"c", "d"} {
				w.run("pg:ns/mid-"+d, 50, true, time.Hour, full(n(d, 0)), full(n(d, 1)))
			}
		},
		wantRack: "r0", wantVictims: []string{"pg:ns/low-a", "pg:ns/low-b"},
	}, {
		name: "only the victims it needs",
		tree: []leafSpec{{name: "one", pods: 1}},
		setup: func(w *world) {
			for i, d := range []string{"a", "b"} {
				w.run(fmt.Sprintf("pod:ns/%s-0", d), int32(2*i), false, time.Hour, full(n(d, 0)))
				w.run(fmt.Sprintf("pod:ns/%s-1", d), int32(2*i+1), false, time.Hour, full(n(d, 1)))
			}
			for _, d := range []string{"c", "d"} {
				w.run("pg:ns/high-"+d, 500, true, time.Hour, full(n(d, 0)), full(n(d, 1)))
			}
		},
		wantRack: "r0", wantVictims: []string{"pod:ns/a-0"},
	}, {
		name: "a running subtree keeps the plan in its rack",
		tree: []leafSpec{{name: "old", running: []string{n("c", 0)}}, {name: "new", pods: 2}},
		setup: func(w *world) {
			w.own("old-0", n("c", 0))
			for _, d := range []string{"a", "b"} {
				w.run("pg:ns/low-"+d, 0, true, time.Hour, full(n(d, 0)), full(n(d, 1)))
			}
			w.run("pod:ns/c-1", 10, false, time.Hour, full(n("c", 1)))
			w.run("pg:ns/mid-d", 20, true, time.Hour, full(n("d", 0)), full(n("d", 1)))
		},
		wantRack: "r1", wantVictims: []string{"pg:ns/mid-d"},
	}, {
		name: "too big for a rack even when empty",
		tree: []leafSpec{{name: "x", pods: 2}, {name: "y", pods: 2}, {name: "z", pods: 1}},
		setup: func(w *world) {
			w.run("pod:ns/a-0", 0, false, time.Hour, full(n("a", 0)))
		},
		whyHas: "the tree does not fit even without its 1 workloads of lower priority",
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := rackWorld(t)
			tc.setup(w)
			root := tree(t, tc.tree...)
			var bound []string
			for _, l := range tc.tree {
				bound = append(bound, l.running...)
			}
			p, why, err := Evaluate(context.Background(), w.built.Config, Request{
				Tree:     &Tree{Namespace: "ns", TopologyKey: "rack", BoundNodes: bound, Placer: treePlacer{root}},
				Priority: 100, Input: w.built.Input, Units: w.units, Now: now,
			})
			if err != nil {
				t.Fatal(err)
			}
			if tc.wantRack == "" {
				if p != nil || !strings.Contains(why, tc.whyHas) {
					t.Fatalf("plan %+v, reason %q; want none, saying %q", p, why, tc.whyHas)
				}
				return
			}
			if p == nil {
				t.Fatalf("no plan: %s", why)
			}
			got := keys(p.Victims)
			slices.Sort(got)
			if diff := cmp.Diff(tc.wantVictims, got); p.TopologyKey != "rack" || p.Domain != tc.wantRack || diff != "" {
				t.Fatalf("plan in %s %s, want rack %s; victims (-want +got):\n%s", p.TopologyKey, p.Domain, tc.wantRack, diff)
			}
			checkTreePlan(t, w, root, p)
		})
	}
}

// checkTreePlan: the plan's decision is the tree placed again on the
// cluster without its victims, inside the planned rack.
func checkTreePlan(t *testing.T, w *world, root *composite.Group, p *Plan) {
	t.Helper()
	snap, err := index.NewSnapshot(context.Background(), w.built.Config.Index, without(w.built.Input, p.Victims))
	if err != nil {
		t.Fatal(err)
	}
	d, u, err := composite.Place(context.Background(), w.built.Config, snap, root, composite.Options{})
	if err != nil || d == nil {
		t.Fatalf("the tree does not fit without the plan's victims: %v %+v", err, u)
	}
	if d.Pods() != len(p.Decision.Pods) {
		t.Errorf("plan places %d pods, the tree %d", len(p.Decision.Pods), d.Pods())
	}
	for _, pp := range p.Decision.Pods {
		if dom, _, _ := strings.Cut(pp.Node, "-"); (dom == "a" || dom == "b") != (p.Domain == "r0") {
			t.Errorf("pod %s on %s, outside rack %s", pp.Name, pp.Node, p.Domain)
		}
	}
}

// TestVictimOrderRanksComposites: at equal priority a CompositePodGroup's
// subtree is more important than a PodGroup, a PodGroup than a pod, and
// so given back first (kube-scheduler's MoreImportantVictim).
func TestVictimOrderRanksComposites(t *testing.T) {
	pod := &Unit{Key: "pod:ns/p", Priority: 5, Pods: make([]*v1.Pod, 9)}
	group := &Unit{Key: "pg:ns/g", Priority: 5, Group: true, Pods: make([]*v1.Pod, 2)}
	tree := &Unit{Key: "cpg:ns/t", Priority: 5, Group: true, Composite: true, Pods: make([]*v1.Pod, 1)}
	low := &Unit{Key: "cpg:ns/low", Priority: 4, Group: true, Composite: true, Pods: make([]*v1.Pod, 20)}
	got := keys(reprieveOrder([]*Unit{low, pod, group, tree}))
	if want := []string{"cpg:ns/t", "pg:ns/g", "pod:ns/p", "cpg:ns/low"}; !slices.Equal(got, want) {
		t.Errorf("order %v, want %v", got, want)
	}
}

// TestClosestTreeDomain: a starving tree reserves the rack of its root's
// level with the most free devices among those it would fit were they
// empty; none when no rack could hold it, or when its members run (it is
// pinned to them).
func TestClosestTreeDomain(t *testing.T) {
	w := rackWorld(t)
	// r0: 2 GPUs free (a-0 full, a-1 half, b full); r1: 8 free (c full).
	w.run("pod:ns/a-0", 0, false, time.Hour, full(n("a", 0)))
	w.run("pod:ns/a-1", 0, false, time.Hour, pod{node: n("a", 1), gpus: []int{0, 1}})
	w.run("pg:ns/b", 0, true, time.Hour, full(n("b", 0)), full(n("b", 1)))
	w.run("pg:ns/c", 0, true, time.Hour, full(n("c", 0)), full(n("c", 1)))
	root := tree(t, leafSpec{name: "enc", pods: 2}, leafSpec{name: "dec", pods: 2})
	r, err := ClosestTreeDomain(context.Background(), w.built.Config, w.built.Input,
		&Tree{Namespace: "ns", TopologyKey: "rack", Placer: treePlacer{root}, Devices: 16}, 0)
	if err != nil || r == nil || r.Domain != "r1" || r.Free != 8 || r.Need != 16 || len(r.Nodes) != 4 {
		t.Fatalf("reservation %+v %v, want rack r1 with 8 of the 16 devices free", r, err)
	}
	big := tree(t, leafSpec{name: "x", pods: 2}, leafSpec{name: "y", pods: 2}, leafSpec{name: "z", pods: 1})
	if r, err := ClosestTreeDomain(context.Background(), w.built.Config, w.built.Input,
		&Tree{Namespace: "ns", TopologyKey: "rack", Placer: treePlacer{big}, Devices: 20}, 0); err != nil || r != nil {
		t.Errorf("a tree no rack can hold: %+v %v", r, err)
	}
	if r, err := ClosestTreeDomain(context.Background(), w.built.Config, w.built.Input,
		&Tree{Namespace: "ns", TopologyKey: "rack", BoundNodes: []string{n("c", 0)}, Placer: treePlacer{root}, Devices: 16}, 0); err != nil || r != nil {
		t.Errorf("a tree with running members: %+v %v, want no reservation", r, err)
	}
}
