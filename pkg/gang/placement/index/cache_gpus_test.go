package index_test

import (
	"fmt"
	"github.com/gpufabric/gpufabric/pkg/gang/placement/scenario"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/structured"

	"github.com/gpufabric/gpufabric/pkg/gang/placement/index"
	"github.com/gpufabric/gpufabric/pkg/gang/placement/placementtest"
	"github.com/gpufabric/gpufabric/pkg/topology"
)

// listFreeGPUs is the free-GPU count the way the scheduler computed it
// before the cache (and still does without one): topology.NodeGPUs over
// every slice, less every device an allocated claim (not with admin
// access) or extra names.
func listFreeGPUs(sls []*resourceapi.ResourceSlice, claims []*resourceapi.ResourceClaim, extra []structured.DeviceID) map[string]int {
	used := map[string]bool{}
	for _, id := range extra {
		used[id.String()] = true
	}
	for _, c := range claims {
		if a := c.Status.Allocation; a != nil {
			for _, r := range a.Devices.Results {
				if r.AdminAccess == nil || !*r.AdminAccess {
					used[r.Driver+"/"+r.Pool+"/"+r.Device] = true
				}
			}
		}
	}
	free := map[string]int{}
	for _, info := range topology.NodeGPUs(sls) {
		for _, g := range info.Devices {
			if g.NVLinkDomain == "" {
				continue
			}
			if _, ok := free[g.NVLinkDomain]; !ok {
				free[g.NVLinkDomain] = 0
			}
			if !used[topology.DriverName+"/"+g.Pool+"/"+g.Device] {
				free[g.NVLinkDomain]++
			}
		}
	}
	return free
}

// gpuWorld is a set of slices and claims changed one event at a time,
// mirrored into a index.Cache.
type gpuWorld struct {
	r      *rand.Rand
	cache  *index.Cache
	slices map[string]*resourceapi.ResourceSlice
	claims map[types.UID]*resourceapi.ResourceClaim
	nodes  []string // nodes that ever had a GPU slice
	next   int
}

func newGPUWorld(t *testing.T, seed uint64) *gpuWorld {
	sc := scenario.Scenario{Domains: []scenario.DomainSpec{
		{ID: "nvl0", Nodes: 4, GPUsPerNode: 4, Channels: 2},
		{ID: "nvl1", Nodes: 3, GPUsPerNode: 4, Channels: 2},
		{ID: "hgx", Kind: string(topology.DomainKindNVSwitch), Nodes: 3, GPUsPerNode: 8},
	}}
	built, err := scenario.Build(sc)
	if err != nil {
		t.Fatal(err)
	}
	w := &gpuWorld{r: rand.New(rand.NewPCG(seed, 3)), cache: index.NewCache(built.Config.Index),
		slices: map[string]*resourceapi.ResourceSlice{}, claims: map[types.UID]*resourceapi.ResourceClaim{}}
	placementtest.FeedCache(w.cache, built.Input)
	for _, sl := range built.Input.ResourceSlices {
		w.slices[sl.Name] = sl
		if sl.Spec.NodeName != nil {
			w.nodes = append(w.nodes, *sl.Spec.NodeName)
		}
	}
	// Another driver's node-local slice with GPU-looking devices: not
	// counted.
	other := scenario.GPUSlice(w.nodes[0], []scenario.GPU{{NVLinkDomain: "nvl0", Rail: -1}})
	other.Name, other.Spec.Driver = "other-driver", "other.example.com"
	w.setSlice(other)
	return w
}

func (w *gpuWorld) setSlice(sl *resourceapi.ResourceSlice) {
	w.slices[sl.Name] = sl
	w.cache.SetSlice(sl)
}

func (w *gpuWorld) setClaim(rc *resourceapi.ResourceClaim) {
	w.claims[rc.UID] = rc
	w.cache.SetClaim(rc)
}

// randomDevice names a device of a GPU pool, sometimes one that does not
// exist, of another driver, or of a pool no slice publishes.
func (w *gpuWorld) randomDevice() (driver, pool, device string) {
	driver, pool = topology.DriverName, w.nodes[w.r.IntN(len(w.nodes))]
	switch w.r.IntN(12) {
	case 0:
		driver = "other.example.com"
	case 1:
		pool = "gone-pool"
	}
	return driver, pool, topology.GPUDeviceName(w.r.IntN(9))
}

// gpuSliceFor returns a GPU slice of node with n GPUs in domain, of the
// given generation, under a name.
func gpuSliceFor(name, node, domain string, n int, gen int64) *resourceapi.ResourceSlice {
	gpus := make([]scenario.GPU, n)
	for i := range gpus {
		gpus[i] = scenario.GPU{NVLinkDomain: domain, Kind: topology.DomainKindMNNVL, Rail: int64(i)}
	}
	sl := scenario.GPUSlice(node, gpus)
	sl.Name, sl.Spec.Pool.Generation = name, gen
	return sl
}

// sliceEvent adds, republishes (a new generation, sometimes as a second
// slice with the old one left behind) or deletes a node-local slice.
func (w *gpuWorld) sliceEvent() string {
	w.next++
	node := w.nodes[w.r.IntN(len(w.nodes))]
	var cur *resourceapi.ResourceSlice
	for _, sl := range w.slices {
		if sl.Spec.NodeName != nil && *sl.Spec.NodeName == node && sl.Spec.Driver == topology.DriverName &&
			(cur == nil || sl.Spec.Pool.Generation > cur.Spec.Pool.Generation) {
			cur = sl
		}
	}
	domain := []string{"nvl0", "nvl1", "nvl2", ""}[w.r.IntN(4)]
	switch op := w.r.IntN(4); {
	case cur == nil:
		w.setSlice(gpuSliceFor(fmt.Sprintf("%s-s%d", node, w.next), node, domain, 1+w.r.IntN(8), 1))
		return "slice added on " + node
	case op == 0:
		w.cache.DeleteSlice(cur.Name)
		delete(w.slices, cur.Name)
		return "slice deleted on " + node
	case op == 1:
		w.setSlice(gpuSliceFor(fmt.Sprintf("%s-s%d", node, w.next), node, domain, 1+w.r.IntN(8), cur.Spec.Pool.Generation+1))
		return "new generation in a second slice on " + node
	case op == 2:
		w.setSlice(gpuSliceFor(cur.Name, node, domain, 1+w.r.IntN(8), cur.Spec.Pool.Generation-1))
		return "slice updated to an older generation on " + node
	default:
		w.setSlice(gpuSliceFor(cur.Name, node, domain, 1+w.r.IntN(8), cur.Spec.Pool.Generation+1))
		return "slice updated to a new generation on " + node
	}
}

// claimEvent allocates a new claim, or deallocates or deletes one.
func (w *gpuWorld) claimEvent() string {
	uids := slices.Sorted(func(yield func(types.UID) bool) {
		for uid := range w.claims {
			if !yield(uid) {
				return
			}
		}
	})
	switch op := w.r.IntN(5); {
	case op < 3 || len(uids) == 0:
		w.next++
		rc := scenario.GPUClaim(fmt.Sprintf("c%04d", w.next), 1)
		a := &resourceapi.AllocationResult{}
		for range 1 + w.r.IntN(4) {
			driver, pool, dev := w.randomDevice()
			r := resourceapi.DeviceRequestAllocationResult{Request: "req", Driver: driver, Pool: pool, Device: dev}
			if w.r.IntN(5) == 0 {
				r.AdminAccess = ptr(true)
			}
			a.Devices.Results = append(a.Devices.Results, r)
		}
		rc.Status.Allocation = a
		w.setClaim(rc)
		return "claim allocated " + rc.Name
	case op == 3:
		rc := w.claims[uids[w.r.IntN(len(uids))]].DeepCopy()
		rc.Status.Allocation = nil
		w.setClaim(rc)
		return "claim deallocated " + rc.Name
	default:
		uid := uids[w.r.IntN(len(uids))]
		delete(w.claims, uid)
		w.cache.DeleteClaim(uid)
		return "claim deleted " + string(uid)
	}
}

// TestCacheFreeGPUs drives random sequences of slice and claim events and
// checks after every one to three of them that Cache.FreeGPUs, with random
// extra devices, is the count from listing the same objects
// (topology.NodeGPUs over the slices, less the claims' devices and extra).
func TestCacheFreeGPUs(t *testing.T) {
	for seed := range uint64(20) {
		w := newGPUWorld(t, seed)
		for step := range 80 {
			var extra []structured.DeviceID
			for range w.r.IntN(6) {
				driver, pool, dev := w.randomDevice()
				extra = append(extra, structured.MakeDeviceID(driver, pool, dev))
			}
			if len(extra) > 0 && w.r.IntN(3) == 0 {
				extra = append(extra, extra[0]) // a duplicate
			}
			var sls []*resourceapi.ResourceSlice
			for _, sl := range w.slices {
				sls = append(sls, sl)
			}
			var claims []*resourceapi.ResourceClaim
			for _, rc := range w.claims {
				claims = append(claims, rc)
			}
			want := listFreeGPUs(sls, claims, extra)
			if diff := cmp.Diff(want, w.cache.FreeGPUs(extra)); diff != "" {
				t.Fatalf("seed %d step %d: FreeGPUs differs (-listed +cache):\n%s", seed, step, diff)
			}
			for range 1 + w.r.IntN(3) {
				what := w.claimEvent
				if w.r.IntN(4) == 0 {
					what = w.sliceEvent
				}
				t.Logf("seed %d step %d: %s", seed, step, what())
			}
		}
	}
}

// TestCacheFreeGPUsRules checks the rules on a small cluster by hand: two
// nodes of domain nvl0 with 4 GPUs each.
func TestCacheFreeGPUsRules(t *testing.T) {
	c := index.NewCache(index.Config{})
	c.SetSlice(gpuSliceFor("a-s1", "a", "nvl0", 4, 1))
	c.SetSlice(gpuSliceFor("b-s1", "b", "nvl0", 4, 1))
	id := func(pool, dev string) structured.DeviceID {
		return structured.MakeDeviceID(topology.DriverName, pool, dev)
	}
	check := func(what string, extra []structured.DeviceID, want map[string]int) {
		t.Helper()
		if diff := cmp.Diff(want, c.FreeGPUs(extra)); diff != "" {
			t.Errorf("%s (-want +got):\n%s", what, diff)
		}
	}
	check("empty", nil, map[string]int{"nvl0": 8})
	c.SetClaim(scenario.AllocatedClaim("x", "a", "gpu-0", "gpu-1"))
	check("a claim holds two", nil, map[string]int{"nvl0": 6})
	admin := scenario.AllocatedClaim("adm", "a", "gpu-2")
	admin.Status.Allocation.Devices.Results[0].AdminAccess = ptr(true)
	c.SetClaim(admin)
	check("admin access takes nothing", nil, map[string]int{"nvl0": 6})
	check("extra: held, duplicate and unknown devices change nothing",
		[]structured.DeviceID{id("a", "gpu-0"), id("a", "gpu-3"), id("a", "gpu-3"), id("a", "gpu-9"), id("nope", "gpu-0")},
		map[string]int{"nvl0": 5})
	c.SetSlice(gpuSliceFor("a-s2", "a", "nvl1", 2, 2))
	check("only the newest generation counts", nil, map[string]int{"nvl0": 4, "nvl1": 0})
	c.DeleteSlice("a-s2")
	check("back to the older generation", nil, map[string]int{"nvl0": 6})
	c.SetClaim(scenario.AllocatedClaim("y", "b", "gpu-0", "gpu-1", "gpu-2", "gpu-3"))
	c.DeleteSlice("a-s1")
	check("a domain with none free is listed at 0", nil, map[string]int{"nvl0": 0})
	c.DeleteClaim(scenario.AllocatedClaim("y", "b").UID)
	check("claim deleted", nil, map[string]int{"nvl0": 4})
}

// BenchmarkCacheFreeGPUs compares the free-GPU count from the cache with
// the listing way (topology.NodeGPUs over every slice, claims marked) at
// 5,000 nodes of 8 GPUs, about half of them allocated: "hgx" has one NVLink
// domain per node (5,000 domains), "mnnvl" domains of 18 nodes.
func BenchmarkCacheFreeGPUs(b *testing.B) {
	for _, kind := range []string{"hgx", "mnnvl"} {
		sc := scenario.HGXScenario(5000, 1)
		if kind == "mnnvl" {
			sc = mnnvlScenario(5000, 18, 1)
		}
		built, err := scenario.Build(sc)
		if err != nil {
			b.Fatal(err)
		}
		in := built.Input
		c := index.NewCache(built.Config.Index)
		placementtest.FeedCache(c, in)
		want := listFreeGPUs(in.ResourceSlices, in.ResourceClaims, nil)
		if diff := cmp.Diff(want, c.FreeGPUs(nil)); diff != "" {
			b.Fatalf("%s: cache and listing differ:\n%s", kind, diff)
		}
		b.Logf("%s: %d domains, %d allocated claims", kind, len(want), len(in.ResourceClaims))
		b.Run(kind+"/listing", func(b *testing.B) {
			for b.Loop() {
				listFreeGPUs(in.ResourceSlices, in.ResourceClaims, nil)
			}
		})
		b.Run(kind+"/cache", func(b *testing.B) {
			for b.Loop() {
				c.FreeGPUs(nil)
			}
		})
		b.Run(kind+"/cache-after-slice-change", func(b *testing.B) {
			sl := in.ResourceSlices[0]
			for b.Loop() {
				c.SetSlice(sl)
				c.FreeGPUs(nil)
			}
		})
	}
}

// mnnvlScenario is nodes nodes of 8 GPUs in NVLink domains of perDomain
// nodes, each node with a uniformly random number of busy GPUs (0..8).
func mnnvlScenario(nodes, perDomain int, seed uint64) scenario.Scenario {
	r := rand.New(rand.NewPCG(seed, 7))
	var sc scenario.Scenario
	for d := 0; d*perDomain < nodes; d++ {
		id := fmt.Sprintf("nvl%03d", d)
		n := min(perDomain, nodes-d*perDomain)
		sc.Domains = append(sc.Domains, scenario.DomainSpec{ID: id, Nodes: n, GPUsPerNode: 8, Channels: 4})
		for i := range n {
			busy := r.Perm(8)[:r.IntN(9)]
			slices.Sort(busy)
			sc.Load = append(sc.Load, scenario.LoadSpec{Node: scenario.NodeName(id, i), GPUs: busy})
		}
	}
	return sc
}
