package preemption

import (
	"context"
	"fmt"
	"github.com/gpufabric/gpufabric/pkg/gang/placement/scenario"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/gpufabric/gpufabric/pkg/gang/placement"
	"github.com/gpufabric/gpufabric/pkg/gang/placement/index"
	"github.com/gpufabric/gpufabric/pkg/gang/placement/placementtest"
	"github.com/gpufabric/gpufabric/pkg/topology"
)

var now = time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)

// world is a fabric of two NVLink domains a and b of 4 nodes × 4 GPUs,
// with running workloads added by the tests.
type world struct {
	built *scenario.Built
	units []*Unit
}

func newWorld(t *testing.T, gang scenario.GangSpec) *world {
	t.Helper()
	b, err := scenario.Build(scenario.Scenario{
		Domains: []scenario.DomainSpec{
			{ID: "a", Nodes: 4, GPUsPerNode: 4},
			{ID: "b", Nodes: 4, GPUsPerNode: 4},
		},
		Gangs: []scenario.GangSpec{gang},
	})
	if err != nil {
		t.Fatal(err)
	}
	return &world{built: b}
}

// pod is one running pod of a workload: node and GPU indexes.
type pod struct {
	node string
	gpus []int
}

// run adds a workload: a unit of one pod, or a whole group when len > 1
// or group is set. started is how long ago it started.
func (w *world) run(key string, prio int32, group bool, started time.Duration, pods ...pod) *Unit {
	u := &Unit{Key: key, Priority: prio, Group: group, Start: now.Add(-started)}
	for i, p := range pods {
		name := fmt.Sprintf("%s-%d", strings.NewReplacer(":", "-", "/", "-").Replace(key), i)
		bp := scenario.BoundPod(name, p.node, "1", "1Gi")
		w.built.Input.Pods = append(w.built.Input.Pods, bp)
		u.Pods = append(u.Pods, bp)
		devs := make([]string, len(p.gpus))
		for j, g := range p.gpus {
			devs[j] = topology.GPUDeviceName(g)
		}
		c := scenario.AllocatedClaim(name, p.node, devs...)
		c.UID = types.UID("claim-" + name)
		w.built.Input.ResourceClaims = append(w.built.Input.ResourceClaims, c)
		u.Claims = append(u.Claims, c.UID)
	}
	w.units = append(w.units, u)
	return u
}

func (w *world) evaluate(t *testing.T, prio int32, budgets map[string]int) (*Plan, string) {
	t.Helper()
	p, why, err := Evaluate(context.Background(), w.built.Config, Request{
		Gang: w.built.Gangs[0], Priority: prio, Input: w.built.Input, Units: w.units, Budgets: budgets, Now: now,
	})
	if err != nil {
		t.Fatal(err)
	}
	if p != nil {
		// The decision must hold on the cluster without the victims.
		in := without(w.built.Input, p.Victims)
		if err := placementtest.NewChecker(in).Check(w.built.Gangs[0], p.Decision); err != nil {
			t.Fatalf("plan's decision does not hold without its victims: %v", err)
		}
	}
	return p, why
}

func keys(us []*Unit) []string {
	out := make([]string, len(us))
	for i, u := range us {
		out[i] = u.Key
	}
	return out
}

var n = scenario.NodeName

func full(node string) pod { return pod{node: node, gpus: []int{0, 1, 2, 3}} }

func TestEvaluate(t *testing.T) {
	nvlink := topology.TopologyKeyNVLinkDomain
	tests := []struct {
		name    string
		gang    scenario.GangSpec
		prio    int32
		setup   func(w *world)
		budgets map[string]int
		// want: domain and victims; empty domain: no plan, whyHas in the reason.
		wantDomain  string
		wantVictims []string
		whyHas      string
		whyHasNot   string // a name the reason must not give
	}{{
		name: "lowest priority victims win over a group of higher priority",
		gang: scenario.GangSpec{Name: "big", Pods: 2, GPUsPerPod: 4, TopologyKey: nvlink},
		prio: 100,
		setup: func(w *world) {
			w.run("pg:default/train", 10, true, time.Hour, full(n("a", 0)), full(n("a", 1)))
			w.run("pod:default/low-0", 0, false, time.Hour, full(n("a", 2)))
			w.run("pod:default/low-1", 0, false, time.Hour, full(n("a", 3)))
			for i := range 4 {
				w.run(fmt.Sprintf("pod:default/mid-%d", i), 50, false, time.Hour, full(n("b", i)))
			}
		},
		wantDomain: "a", wantVictims: []string{"pod:default/low-0", "pod:default/low-1"},
	}, {
		name: "only as many victims as the gang needs",
		gang: scenario.GangSpec{Name: "one", Pods: 1, GPUsPerPod: 4, TopologyKey: nvlink},
		prio: 100,
		setup: func(w *world) {
			for i := range 4 {
				w.run(fmt.Sprintf("pod:default/a-%d", i), int32(i), false, time.Hour, full(n("a", i)))
				w.run(fmt.Sprintf("pod:default/b-%d", i), 20, false, time.Hour, full(n("b", i)))
			}
		},
		wantDomain: "a", wantVictims: []string{"pod:default/a-0"},
	}, {
		name: "one group beats two pods of the same priority",
		gang: scenario.GangSpec{Name: "big", Pods: 2, GPUsPerPod: 4, TopologyKey: nvlink},
		prio: 100,
		setup: func(w *world) {
			w.run("pod:default/p0", 0, false, time.Minute, full(n("a", 0)))
			w.run("pod:default/p1", 0, false, time.Minute, full(n("a", 1)))
			w.run("pod:default/p2", 0, false, time.Minute, full(n("a", 2)))
			w.run("pod:default/p3", 0, false, time.Minute, full(n("a", 3)))
			w.run("pg:default/pair", 0, true, time.Hour, full(n("b", 0)), full(n("b", 1)))
			w.run("pg:default/pair2", 0, true, time.Hour, full(n("b", 2)), full(n("b", 3)))
		},
		// Equal in all else, the key decides: pair is more important.
		wantDomain: "b", wantVictims: []string{"pg:default/pair2"},
	}, {
		name: "least GPU-time lost breaks the tie",
		gang: scenario.GangSpec{Name: "one", Pods: 1, GPUsPerPod: 4, TopologyKey: nvlink},
		prio: 100,
		setup: func(w *world) {
			for i := range 4 {
				w.run(fmt.Sprintf("pod:default/old-%d", i), 0, false, 10*time.Hour, full(n("a", i)))
				w.run(fmt.Sprintf("pod:default/new-%d", i), 0, false, time.Duration(i+1)*time.Minute, full(n("b", i)))
			}
		},
		wantDomain: "b", wantVictims: []string{"pod:default/new-0"},
	}, {
		name: "equal or higher priority is never a victim",
		gang: scenario.GangSpec{Name: "one", Pods: 1, GPUsPerPod: 4, TopologyKey: nvlink},
		prio: 50,
		setup: func(w *world) {
			for i := range 4 {
				w.run(fmt.Sprintf("pod:default/a-%d", i), 50, false, time.Hour, full(n("a", i)))
				w.run(fmt.Sprintf("pod:default/b-%d", i), 90, false, time.Hour, full(n("b", i)))
			}
		},
		whyHas: "no running workload has a priority below 50",
	}, {
		name: "a budget that allows no disruption moves the plan elsewhere",
		gang: scenario.GangSpec{Name: "one", Pods: 1, GPUsPerPod: 4, TopologyKey: nvlink},
		prio: 100,
		setup: func(w *world) {
			for i := range 4 {
				u := w.run(fmt.Sprintf("pod:default/a-%d", i), 0, false, time.Hour, full(n("a", i)))
				u.Budgets = map[string]int{"default/serving": 1}
				w.run(fmt.Sprintf("pod:default/b-%d", i), 5, false, time.Hour, full(n("b", i)))
			}
		},
		budgets:    map[string]int{"default/serving": 0},
		wantDomain: "b", wantVictims: []string{"pod:default/b-3"},
	}, {
		name: "budgets everywhere: no plan, the budget named",
		gang: scenario.GangSpec{Name: "one", Pods: 1, GPUsPerPod: 4, TopologyKey: nvlink},
		prio: 100,
		setup: func(w *world) {
			for _, d := range []string{"a", "b"} {
				for i := range 4 {
					u := w.run(fmt.Sprintf("pod:default/%s-%d", d, i), 0, false, time.Hour, full(n(d, i)))
					u.Budgets = map[string]int{"default/serving": 1}
				}
			}
		},
		budgets: map[string]int{"default/serving": 0},
		whyHas:  "PodDisruptionBudget default/serving allows 0 disruptions, the gang needs 1",
	}, {
		name: "another namespace's budget is not named",
		gang: scenario.GangSpec{Name: "one", Pods: 1, GPUsPerPod: 4, TopologyKey: nvlink},
		prio: 100,
		setup: func(w *world) {
			for _, d := range []string{"a", "b"} {
				for i := range 4 {
					u := w.run(fmt.Sprintf("pod:tenant-b/%s-%d", d, i), 0, false, time.Hour, full(n(d, i)))
					u.Budgets = map[string]int{"tenant-b/secret-serving": 1}
				}
			}
		},
		budgets:   map[string]int{"tenant-b/secret-serving": 0},
		whyHas:    "a PodDisruptionBudget of another namespace allows 0 disruptions, the gang needs 1",
		whyHasNot: "secret-serving",
	}, {
		name: "too big for any domain even when empty",
		gang: scenario.GangSpec{Name: "huge", Pods: 5, GPUsPerPod: 4, TopologyKey: nvlink},
		prio: 100,
		setup: func(w *world) {
			w.run("pod:default/x", 0, false, time.Hour, full(n("a", 0)))
		},
		whyHas: "does not fit even without its 1 workloads of lower priority",
	}, {
		name: "without a key the smallest level with a plan wins",
		gang: scenario.GangSpec{Name: "wide", Pods: 6, GPUsPerPod: 4},
		prio: 100,
		setup: func(w *world) {
			for _, d := range []string{"a", "b"} {
				for i := range 4 {
					w.run(fmt.Sprintf("pod:default/%s-%d", d, i), 0, false, time.Hour, pod{node: n(d, i), gpus: []int{0}})
				}
			}
		},
		wantDomain:  topology.ClusterDomainID,
		wantVictims: []string{"pod:default/a-2", "pod:default/a-3", "pod:default/b-0", "pod:default/b-1", "pod:default/b-2", "pod:default/b-3"},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t, tc.gang)
			tc.setup(w)
			p, why := w.evaluate(t, tc.prio, tc.budgets)
			if tc.wantDomain == "" {
				if p != nil {
					t.Fatalf("want no plan, got %s %v", p.Domain, keys(p.Victims))
				}
				if !strings.Contains(why, tc.whyHas) {
					t.Fatalf("reason %q does not say %q", why, tc.whyHas)
				}
				if tc.whyHasNot != "" && strings.Contains(why, tc.whyHasNot) {
					t.Fatalf("reason %q names %q", why, tc.whyHasNot)
				}
				return
			}
			if p == nil {
				t.Fatalf("no plan: %s", why)
			}
			got := keys(p.Victims)
			slices.Sort(got)
			if diff := cmp.Diff(tc.wantVictims, got); p.Domain != tc.wantDomain || diff != "" {
				t.Fatalf("plan in %s, want %s; victims (-want +got):\n%s", p.Domain, tc.wantDomain, diff)
			}
		})
	}
}

func TestEvaluateCountsAGroupWhole(t *testing.T) {
	// A group with pods in a and b: evicting it for room in a loses all of
	// its GPU-time, so three single pods in b of the same priority win.
	w := newWorld(t, scenario.GangSpec{Name: "one", Pods: 1, GPUsPerPod: 4, TopologyKey: topology.TopologyKeyNVLinkDomain})
	for i := range 4 {
		w.run(fmt.Sprintf("pg:default/spread-%d", i), 0, true, time.Hour, full(n("a", i)), full(n("b", i)))
	}
	p, why := w.evaluate(t, 100, nil)
	if p == nil {
		t.Fatalf("no plan: %s", why)
	}
	if p.Cost.Devices != 8 || p.Cost.Pods != 2 || p.Cost.GPUSeconds != 8*3600 {
		t.Fatalf("cost %+v, want the whole group: 8 devices, 2 pods, 8 GPU-hours", p.Cost)
	}
}

func TestWithoutNodes(t *testing.T) {
	w := newWorld(t, scenario.GangSpec{Name: "g", Pods: 1, GPUsPerPod: 1})
	w.run("pod:default/x", 0, false, time.Hour, full(n("a", 0)))
	in := WithoutNodes(w.built.Input, sets.New(n("a", 0), n("a", 1)))
	if len(in.Nodes) != 6 || len(in.Pods) != 0 {
		t.Fatalf("nodes %d pods %d, want 6 and 0", len(in.Nodes), len(in.Pods))
	}
	for _, s := range in.ResourceSlices {
		if s.Spec.NodeName != nil && (*s.Spec.NodeName == n("a", 0) || *s.Spec.NodeName == n("a", 1)) {
			t.Fatalf("slice of a removed node kept: %s", s.Name)
		}
	}
	snap, err := index.NewSnapshot(context.Background(), w.built.Config.Index, in)
	if err != nil {
		t.Fatal(err)
	}
	d, _, err := placement.Place(context.Background(), w.built.Config, snap, w.built.Gangs[0])
	if err != nil || d == nil {
		t.Fatalf("place: %v", err)
	}
	if node := d.Pods[0].Node; node == n("a", 0) || node == n("a", 1) {
		t.Fatalf("placed on removed node %s", node)
	}
}

var _ = v1.PodRunning
