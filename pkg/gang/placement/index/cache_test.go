package index_test

import (
	"context"
	"fmt"
	"github.com/gpufabric/gpufabric/pkg/gang/placement/scenario"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpufabric/gpufabric/pkg/gang/placement"
	"github.com/gpufabric/gpufabric/pkg/gang/placement/index"
	"github.com/gpufabric/gpufabric/pkg/gang/placement/placementtest"
	"github.com/gpufabric/gpufabric/pkg/topology"
)

// cacheWorld is a cluster changed one event at a time, mirrored into a
// index.Cache as the scheduler's informers would.
type cacheWorld struct {
	t       *testing.T
	r       *rand.Rand
	cache   *index.Cache
	cfg     placement.Config
	nodes   []*v1.Node
	slices  []*resourceapi.ResourceSlice
	pending []*placementtest.PlacedGang // placed, not yet shown by the "informers"
	bound   []*placementtest.PlacedGang // shown
	next    int
}

func newCacheWorld(t *testing.T, seed uint64) *cacheWorld {
	sc := scenario.Scenario{Levels: []string{"rack"}, Domains: []scenario.DomainSpec{
		{ID: "nvl0", Nodes: 6, GPUsPerNode: 4, Channels: 6, CPU: "16", Labels: map[string]string{"rack": "r0"}},
		{ID: "nvl1", Nodes: 5, GPUsPerNode: 4, Channels: 6, CPU: "16", Labels: map[string]string{"rack": "r1"}},
		{ID: "hgx", Kind: string(topology.DomainKindNVSwitch), Nodes: 4, GPUsPerNode: 8, CPU: "16", Labels: map[string]string{"rack": "r1"}},
	}}
	r := rand.New(rand.NewPCG(seed, 11))
	built, err := scenario.Build(sc)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range built.Input.Nodes {
		if r.IntN(3) == 0 {
			sc.Load = append(sc.Load, scenario.LoadSpec{Node: n.Name, GPUs: r.Perm(4)[:1+r.IntN(3)], CPU: "2"})
		}
	}
	if built, err = scenario.Build(sc); err != nil {
		t.Fatal(err)
	}
	// A loaded machine must not turn an Allocate timeout into a different
	// decision between the cached and the fresh snapshot.
	built.Config.Index.AllocateTimeout = time.Minute
	w := &cacheWorld{t: t, r: r, cfg: built.Config, cache: index.NewCache(built.Config.Index), nodes: built.Input.Nodes, slices: built.Input.ResourceSlices}
	placementtest.FeedCache(w.cache, built.Input)
	return w
}

func (w *cacheWorld) randomSpec() scenario.GangSpec {
	w.next++
	gs := scenario.GangSpec{Name: fmt.Sprintf("g%03d", w.next), Pods: 1 + w.r.IntN(4), GPUsPerPod: int64(1 + w.r.IntN(4)), CPU: fmt.Sprint(1 + w.r.IntN(4))}
	gs.FabricClaim = w.r.IntN(4) == 0
	gs.OnePerNode = w.r.IntN(5) == 0
	if w.r.IntN(5) == 0 {
		gs.TopologyKey = "rack"
	}
	return gs
}

// snapshot returns the incremental snapshot and a fresh one of the same
// state, both with the pending decisions assumed.
func (w *cacheWorld) snapshot(ctx context.Context, prev *index.Snapshot) (*index.Snapshot, *index.Snapshot) {
	w.t.Helper()
	incr, err := w.cache.Update(ctx, prev)
	if err != nil {
		w.t.Fatalf("update: %v", err)
	}
	fresh, err := index.NewSnapshot(ctx, w.cfg.Index, w.cache.Input())
	if err != nil {
		w.t.Fatalf("new snapshot: %v", err)
	}
	for _, pg := range w.pending {
		for _, s := range []*index.Snapshot{incr, fresh} {
			if err := placement.Assume(ctx, s, pg.Gang, pg.Decision); err != nil {
				w.t.Fatalf("assume: %v", err)
			}
		}
	}
	return incr, fresh
}

// step changes the world by one random event.
func (w *cacheWorld) step(ctx context.Context, snap *index.Snapshot) string {
	switch op := w.r.IntN(20); {
	case op < 8:
		g, claims, err := scenario.BuildGang(w.randomSpec())
		if err != nil {
			w.t.Fatal(err)
		}
		d, _, err := placement.Place(ctx, w.cfg, snap, g)
		if err != nil {
			w.t.Fatalf("place: %v", err)
		}
		if d == nil {
			return "place: refused"
		}
		pg := placementtest.NewPlacedGang(g, d, claims)
		w.pending = append(w.pending, pg)
		return "place " + d.Domain
	case op < 12 && len(w.pending) > 0:
		pg := w.pending[0]
		w.pending = w.pending[1:]
		w.confirm(pg)
		w.bound = append(w.bound, pg)
		return "confirm"
	case op < 15 && len(w.bound) > 0:
		i := w.r.IntN(len(w.bound))
		w.finish(w.bound[i])
		w.bound = append(w.bound[:i], w.bound[i+1:]...)
		return "finish"
	case op < 18:
		i := w.r.IntN(len(w.nodes))
		n := w.nodes[i].DeepCopy()
		switch w.r.IntN(3) {
		case 0:
			n.Spec.Unschedulable = !n.Spec.Unschedulable
		case 1:
			if len(n.Spec.Taints) == 0 {
				n.Spec.Taints = []v1.Taint{{Key: "maintenance", Effect: v1.TaintEffectNoSchedule}}
			} else {
				n.Spec.Taints = nil
			}
		default:
			n.Status.Allocatable[v1.ResourceCPU] = resource.MustParse(fmt.Sprint(4 + w.r.IntN(16)))
		}
		w.nodes[i] = n
		w.cache.SetNode(n)
		return "node " + n.Name
	case op < 19:
		i := w.r.IntN(len(w.nodes))
		n := w.nodes[i].DeepCopy()
		n.Labels["rack"] = fmt.Sprintf("r%d", w.r.IntN(3))
		w.nodes[i] = n
		w.cache.SetNode(n)
		return "relabel " + n.Name
	default:
		i := w.r.IntN(len(w.slices))
		sl := w.slices[i].DeepCopy()
		sl.ResourceVersion = fmt.Sprint(w.next)
		w.slices[i] = sl
		w.cache.SetSlice(sl)
		return "slice " + sl.Name
	}
}

// confirm writes a decision the way the informers would show it.
func (w *cacheWorld) confirm(pg *placementtest.PlacedGang) {
	for i, pp := range pg.Decision.Pods {
		if pg.Gang.Members[i].Pod.UID != pp.UID {
			w.t.Fatalf("decision pod %s is not member %d", pp.Name, i)
		}
	}
	placementtest.ApplyDecision(w.cache, pg)
}

// finish ends a gang: pods deleted or succeeded, claims deleted or
// deallocated.
func (w *cacheWorld) finish(pg *placementtest.PlacedGang) {
	for i, pp := range pg.Decision.Pods {
		if w.r.IntN(2) == 0 {
			w.cache.DeletePod(pp.UID)
			continue
		}
		p := pg.Gang.Members[i].Pod.DeepCopy()
		p.Spec.NodeName, p.Status.Phase = pp.Node, v1.PodSucceeded
		w.cache.SetPod(p)
	}
	for _, c := range pg.Claims {
		if w.r.IntN(2) == 0 {
			w.cache.DeleteClaim(c.UID)
			continue
		}
		c = c.DeepCopy()
		c.Status.Allocation = nil
		w.cache.SetClaim(c)
	}
}

// TestCacheMatchesFreshSnapshot drives random event sequences (gangs
// placed, shown by the informers and finished; nodes cordoned, tainted,
// resized and relabelled; slices republished) and checks after every event
// that the snapshot Cache.Update keeps up to date is the one NewSnapshot
// builds from the same objects: the same node state, cluster allocations
// and level indexes, and the same Place answers for probe gangs.
func TestCacheMatchesFreshSnapshot(t *testing.T) {
	ctx := context.Background()
	probes := []scenario.GangSpec{
		{Name: "probe-a", Pods: 2, GPUsPerPod: 2},
		{Name: "probe-b", Pods: 5, GPUsPerPod: 4, TopologyKey: "rack"},
		{Name: "probe-c", Pods: 1, GPUsPerPod: 8},
		{Name: "probe-d", Pods: 3, GPUsPerPod: 1, FabricClaim: true, OnePerNode: true},
	}
	reused, steps := 0, 0
	for seed := range uint64(12) {
		w := newCacheWorld(t, seed)
		var snap *index.Snapshot
		for step := range 60 {
			incr, fresh := w.snapshot(ctx, snap)
			if incr == snap {
				reused++
			}
			steps++
			snap = incr
			for _, ps := range probes {
				g1, _, err := scenario.BuildGang(ps)
				if err != nil {
					t.Fatal(err)
				}
				g2, _, _ := scenario.BuildGang(ps)
				d1, u1, err1 := placement.Place(ctx, w.cfg, incr, g1)
				d2, u2, err2 := placement.Place(ctx, w.cfg, fresh, g2)
				if err1 != nil || err2 != nil {
					t.Fatalf("seed %d step %d: place: %v / %v", seed, step, err1, err2)
				}
				if diff := cmp.Diff(d2, d1, cmpopts.IgnoreFields(placement.Stats{}, "MaxAllocate")); diff != "" {
					t.Fatalf("seed %d step %d probe %s: decision differs (-fresh +incremental):\n%s", seed, step, ps.Name, diff)
				}
				if (u1 == nil) != (u2 == nil) || u1 != nil && u1.Message != u2.Message {
					t.Fatalf("seed %d step %d probe %s: refusal differs:\nincremental: %v\nfresh: %v", seed, step, ps.Name, u1, u2)
				}
			}
			keys := index.LevelKeys(incr)
			a, err := index.StateDigest(ctx, incr, keys)
			if err != nil {
				t.Fatal(err)
			}
			b, err := index.StateDigest(ctx, fresh, keys)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(b, a); diff != "" {
				t.Fatalf("seed %d step %d: state differs (-fresh +incremental):\n%s", seed, step, diff)
			}
			what := w.step(ctx, snap)
			t.Logf("seed %d step %d: %s", seed, step, what)
		}
	}
	// Rebuilds come from relabels and slices (1 event in 10) and the
	// first Update; most must be incremental or the cache saves nothing.
	if reused*2 < steps {
		t.Errorf("only %d of %d updates were incremental", reused, steps)
	}
	t.Logf("%d of %d updates incremental", reused, steps)
}

// TestCacheCaught: Caught says whether the cache was given an object at a
// resourceVersion, so a lister ahead of the cache is not taken for it.
func TestCacheCaught(t *testing.T) {
	c := index.NewCache(index.Config{})
	pod := scenario.BoundPod("p", "n1", "1", "1Gi")
	pod.ResourceVersion = "10"
	claim := scenario.AllocatedClaim("c", "n1", "gpu-0")
	claim.ResourceVersion = "12"
	c.SetPod(pod)
	c.SetClaim(claim)
	unbound := scenario.Pod("q", "1", "1Gi")
	unbound.ResourceVersion = "7"
	c.SetPod(unbound)
	odd := scenario.Pod("r", "1", "1Gi")
	odd.ResourceVersion = "abc"
	c.SetPod(odd)
	tests := []struct {
		name string
		uid  types.UID
		rv   string
		want bool
	}{
		{"pod at its version", pod.UID, "10", true},
		{"pod at an older version", pod.UID, "9", true},
		{"pod written later", pod.UID, "11", false},
		{"claim at its version", claim.UID, "12", true},
		{"claim written later", claim.UID, "13", false},
		{"unbound pod is seen too", unbound.UID, "7", true},
		{"never given", "other", "1", false},
		{"unparsable version", pod.UID, "x", false},
		{"unparsable, the same string", odd.UID, "abc", true},
		{"unparsable, another string", odd.UID, "abd", false},
	}
	for _, tc := range tests {
		if got := c.Caught(tc.uid, tc.rv); got != tc.want {
			t.Errorf("%s: Caught(%s, %s) = %v, want %v", tc.name, tc.uid, tc.rv, got, tc.want)
		}
	}
	c.DeletePod(pod.UID)
	c.DeleteClaim(claim.UID)
	if c.Caught(pod.UID, "1") || c.Caught(claim.UID, "1") {
		t.Errorf("deleted objects still caught")
	}
}
