package placement_test

import (
	"context"
	"flag"
	"fmt"
	"github.com/gpufabric/gpufabric/pkg/gang/placement/scenario"
	"runtime"
	"slices"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"

	"github.com/gpufabric/gpufabric/pkg/gang/placement"
	"github.com/gpufabric/gpufabric/pkg/gang/placement/index"
	"github.com/gpufabric/gpufabric/pkg/gang/placement/placementtest"
	"github.com/gpufabric/gpufabric/pkg/gang/placement/spares"
)

// benchSpares keeps spare nodes per rack in the benchmarks on the HGX
// fabric (its NVLink domains are single nodes), to measure what the
// spares' check costs (docs/benchmarks.md).
var benchSpares = flag.Int("bench-spares", 0, "spare nodes per rack kept from new gangs in the HGX benchmarks")

// benchLargeGang sets Config.LargeGangGPUs in the HGX benchmarks, to
// measure what ranking domains by fabric health costs (docs/benchmarks.md).
var benchLargeGang = flag.Int("bench-large-gang-gpus", 0, "Config.LargeGangGPUs in the HGX benchmarks (0: off)")

func buildBench(b *testing.B, nodes int, seed uint64, gangs ...scenario.GangSpec) *scenario.Built {
	b.Helper()
	sc := scenario.HGXScenario(nodes, seed)
	sc.Gangs = gangs
	sc.Spares = spares.Policy{PerDomain: *benchSpares, Level: "rack"}
	built, err := scenario.Build(sc)
	if err != nil {
		b.Fatal(err)
	}
	built.Config.LargeGangGPUs = *benchLargeGang
	return built
}

// percentile returns the p-th percentile (0..1) of sorted durations in ms.
func percentile(sorted []time.Duration, p float64) float64 {
	i := min(len(sorted)-1, int(p*float64(len(sorted))))
	return float64(sorted[i].Microseconds()) / 1000
}

// BenchmarkGang64x8 places a 64-pod gang with 8 GPUs per pod on 5,000 nodes
// (40,000 GPUs, 50% busy). The gang fits no rack or leaf, so the engine
// rejects those by counts and lands in a spine. Reports p50/p99 latency of
// Place (wall and this thread's CPU time, which a loaded machine does not
// inflate), the slowest single Allocate call, and the snapshot warm-up (CEL
// class matching of all 40,000 devices on first use, cold and with a
// MatchCache from the previous snapshot).
func BenchmarkGang64x8(b *testing.B) {
	ctx := context.Background()
	runtime.LockOSThread() // threadCPU measures this thread
	defer runtime.UnlockOSThread()
	built := buildBench(b, 5000, 1, scenario.GangSpec{Name: "big", Pods: 64, GPUsPerPod: 8})
	built.Config.Index.MatchCache = index.NewMatchCache()
	var snap *index.Snapshot
	var build, warm [2]time.Duration
	for i := range 2 { // cold, then with the MatchCache of the first snapshot
		start := time.Now()
		var err error
		if snap, err = index.NewSnapshot(ctx, built.Config.Index, built.Input); err != nil {
			b.Fatal(err)
		}
		build[i] = time.Since(start)
		start = time.Now()
		if d, u, err := placement.Place(ctx, built.Config, snap, built.Gangs[0]); err != nil || d == nil {
			b.Fatalf("warm-up: %v %+v", err, u)
		}
		warm[i] = time.Since(start)
	}
	var lat, cpu []time.Duration
	var maxAlloc time.Duration
	calls := 0
	b.ResetTimer()
	for b.Loop() {
		t0, c0 := time.Now(), threadCPU()
		d, _, err := placement.Place(ctx, built.Config, snap, built.Gangs[0])
		lat, cpu = append(lat, time.Since(t0)), append(cpu, threadCPU()-c0)
		if err != nil || d == nil {
			b.Fatalf("place: %v", err)
		}
		maxAlloc = max(maxAlloc, d.Stats.MaxAllocate)
		calls = d.Stats.AllocateCalls
	}
	slices.Sort(lat)
	slices.Sort(cpu)
	b.ReportMetric(percentile(lat, 0.5), "p50-ms")
	b.ReportMetric(percentile(lat, 0.99), "p99-ms")
	if cpu[len(cpu)-1] > 0 {
		b.ReportMetric(percentile(cpu, 0.5), "p50-cpu-ms")
		b.ReportMetric(percentile(cpu, 0.99), "p99-cpu-ms")
	}
	b.ReportMetric(float64(maxAlloc.Microseconds())/1000, "max-allocate-ms")
	b.ReportMetric(float64(calls), "allocate-calls")
	b.ReportMetric(float64(build[0].Milliseconds()), "snapshot-ms")
	b.ReportMetric(float64(warm[0].Milliseconds()), "warmup-cold-ms")
	b.ReportMetric(float64(warm[1].Milliseconds()), "warmup-cached-ms")
}

// BenchmarkOnePodGangs places one-pod gangs (1, 2, 4 or 8 GPUs) one after
// the other on the 5,000-node cluster, assuming each decision, and reports
// placements per second. The snapshot is rebuilt (untimed) when full.
func BenchmarkOnePodGangs(b *testing.B) {
	ctx := context.Background()
	var specs []scenario.GangSpec
	for i, g := range []int64{1, 2, 4, 8} {
		specs = append(specs, scenario.GangSpec{Name: fmt.Sprintf("one-%d", i), Pods: 1, GPUsPerPod: g})
	}
	built := buildBench(b, 5000, 2, specs...)
	fresh := func() *index.Snapshot {
		snap, err := index.NewSnapshot(ctx, built.Config.Index, built.Input)
		if err != nil {
			b.Fatal(err)
		}
		if _, _, err := placement.Place(ctx, built.Config, snap, built.Gangs[0]); err != nil { // warm-up
			b.Fatal(err)
		}
		return snap
	}
	snap := fresh()
	var maxAlloc time.Duration
	i := 0
	b.ResetTimer()
	for b.Loop() {
		g := built.Gangs[i%len(built.Gangs)]
		i++
		d, _, err := placement.Place(ctx, built.Config, snap, g)
		if err != nil {
			b.Fatal(err)
		}
		if d == nil {
			b.StopTimer()
			snap = fresh()
			b.StartTimer()
			continue
		}
		maxAlloc = max(maxAlloc, d.Stats.MaxAllocate)
		// Assume mutates the snapshot's copy of the state; the decision's
		// claims are the builder's objects, reused across iterations, which
		// is fine because the snapshot only reads their allocation.
		if err := placement.Assume(ctx, snap, g, d); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "placements/s")
	b.ReportMetric(float64(maxAlloc.Microseconds())/1000, "max-allocate-ms")
}

// BenchmarkEngine16x8Small and BenchmarkNaive16x8Small compare the engine
// with a naive first fit that gives the allocator all slices (as a
// scheduler without a count filter would) on 500 nodes / 4,000 GPUs.
func BenchmarkEngine16x8Small(b *testing.B) {
	ctx := context.Background()
	built := buildBench(b, 500, 3, scenario.GangSpec{Name: "g", Pods: 16, GPUsPerPod: 8})
	snap, err := index.NewSnapshot(ctx, built.Config.Index, built.Input)
	if err != nil {
		b.Fatal(err)
	}
	var maxAlloc time.Duration
	for b.Loop() {
		d, _, err := placement.Place(ctx, built.Config, snap, built.Gangs[0])
		if err != nil || d == nil {
			b.Fatalf("place: %v", err)
		}
		maxAlloc = max(maxAlloc, d.Stats.MaxAllocate)
	}
	b.ReportMetric(float64(maxAlloc.Microseconds())/1000, "max-allocate-ms")
}

func BenchmarkNaive16x8Small(b *testing.B) {
	ctx := context.Background()
	built := buildBench(b, 500, 3, scenario.GangSpec{Name: "g", Pods: 16, GPUsPerPod: 8})
	var maxAlloc time.Duration
	for b.Loop() {
		maxAlloc = max(maxAlloc, naivePlace(ctx, b, built))
	}
	b.ReportMetric(float64(maxAlloc.Microseconds())/1000, "max-allocate-ms")
}

// naivePlace is first fit without topology: for each member, try the nodes
// in name order with an allocator over all slices. It returns the slowest
// Allocate call.
func naivePlace(ctx context.Context, b *testing.B, built *scenario.Built) time.Duration {
	allocated := sets.New[structured.DeviceID]()
	for _, c := range built.Input.ResourceClaims {
		for _, r := range c.Status.Allocation.Devices.Results {
			allocated.Insert(structured.MakeDeviceID(r.Driver, r.Pool, r.Device))
		}
	}
	classes := classList(built.Input.DeviceClasses)
	cache := cel.NewCache(10, cel.Features{})
	var slowest time.Duration
	nodes := built.Input.Nodes
	next := 0
	for _, m := range built.Gangs[0].Members {
		for ; next < len(nodes); next++ {
			alloc, err := structured.NewAllocator(ctx, index.DefaultFeatures(), structured.AllocatedState{AllocatedDevices: allocated}, classes, built.Input.ResourceSlices, cache)
			if err != nil {
				b.Fatal(err)
			}
			t0 := time.Now()
			res, err := alloc.Allocate(ctx, nodes[next], m.Claims)
			slowest = max(slowest, time.Since(t0))
			if err != nil {
				b.Fatal(err)
			}
			if res != nil {
				for _, r := range res[0].Devices.Results {
					allocated.Insert(structured.MakeDeviceID(r.Driver, r.Pool, r.Device))
				}
				break
			}
		}
		if next == len(nodes) {
			b.Fatal("naive: no node")
		}
	}
	return slowest
}

type classList []*resourceapi.DeviceClass

func (l classList) List() ([]*resourceapi.DeviceClass, error) { return l, nil }
func (l classList) Get(name string) (*resourceapi.DeviceClass, error) {
	for _, c := range l {
		if c.Name == name {
			return c, nil
		}
	}
	return nil, fmt.Errorf("class %s not found", name)
}

// BenchmarkRefusal refuses a 64-pod gang with 8 GPUs per pod that requires
// one rack (128 GPUs) on the 5,000-node cluster, and reports the latency of
// Place including the per-domain explanation (compare with
// BenchmarkGang64x8, the same gang placed in a spine).
func BenchmarkRefusal(b *testing.B) {
	ctx := context.Background()
	built := buildBench(b, 5000, 1, scenario.GangSpec{Name: "big", Pods: 64, GPUsPerPod: 8, TopologyKey: "rack"})
	built.Config.Index.MatchCache = index.NewMatchCache()
	snap, err := index.NewSnapshot(ctx, built.Config.Index, built.Input)
	if err != nil {
		b.Fatal(err)
	}
	if _, _, err := placement.Place(ctx, built.Config, snap, built.Gangs[0]); err != nil { // warm-up: class matching
		b.Fatal(err)
	}
	var lat []time.Duration
	explained := 0
	for b.Loop() {
		t0 := time.Now()
		d, u, err := placement.Place(ctx, built.Config, snap, built.Gangs[0])
		lat = append(lat, time.Since(t0))
		if err != nil || d != nil || u == nil {
			b.Fatalf("want a refusal: %v %v", err, d)
		}
		explained = len(u.Domains)
	}
	if explained == 0 {
		b.Fatal("refusal explains no domain")
	}
	slices.Sort(lat)
	b.ReportMetric(percentile(lat, 0.5), "p50-ms")
	b.ReportMetric(percentile(lat, 0.99), "p99-ms")
	b.ReportMetric(float64(explained), "domains-explained")
}

// BenchmarkSmallGangCycle is one scheduling cycle of a 3-pod one-GPU gang
// on 5,000 nodes as the scheduler ran it before index.Cache (the
// baseline of BenchmarkSmallGangCycleCached, and still the path of an
// attempt with held nodes): a new snapshot from unchanged informer objects
// (MatchCache warm from the cycle before), then Place. Reports the
// snapshot's and Place's share.
func BenchmarkSmallGangCycle(b *testing.B) {
	ctx := context.Background()
	built := buildBench(b, 5000, 1, scenario.GangSpec{Name: "small", Pods: 3, GPUsPerPod: 1})
	built.Config.Index.MatchCache = index.NewMatchCache()
	var build, place time.Duration
	for b.Loop() {
		t0 := time.Now()
		snap, err := index.NewSnapshot(ctx, built.Config.Index, built.Input)
		if err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if d, u, err := placement.Place(ctx, built.Config, snap, built.Gangs[0]); err != nil || d == nil {
			b.Fatalf("place: %v %+v", err, u)
		}
		build, place = build+t1.Sub(t0), place+time.Since(t1)
	}
	b.ReportMetric(float64(build.Microseconds())/1000/float64(b.N), "snapshot-ms/op")
	b.ReportMetric(float64(place.Microseconds())/1000/float64(b.N), "place-ms/op")
}

// BenchmarkSmallGangCycleCached is BenchmarkSmallGangCycle as the scheduler
// runs it since issue 15: the snapshot is kept by a index.Cache, each
// cycle brings it up to date from the events since the cycle before (the
// previous gang's pods bound and claims allocated, the gang of two cycles
// before finished: about 9 nodes changed), then Place. Reports the update's
// and Place's share, the event handlers' time, and the first cycle after a
// rebuild (new snapshot, level index of all nodes), which is paid once per
// fabric change.
func BenchmarkSmallGangCycleCached(b *testing.B) {
	ctx := context.Background()
	built := buildBench(b, 5000, 1)
	built.Config.Index.MatchCache = index.NewMatchCache()
	cache := index.NewCache(built.Config.Index)
	placementtest.FeedCache(cache, built.Input)
	start := time.Now()
	snap, err := cache.Update(ctx, nil)
	if err != nil {
		b.Fatal(err)
	}
	warm, _, _ := scenario.BuildGang(scenario.GangSpec{Name: "warm", Pods: 3, GPUsPerPod: 1})
	if d, u, err := placement.Place(ctx, built.Config, snap, warm); err != nil || d == nil {
		b.Fatalf("place: %v %+v", err, u)
	}
	rebuild := time.Since(start)
	var events, update, place time.Duration
	var placed []*placementtest.PlacedGang
	i := 0
	for b.Loop() {
		i++
		g, claims, err := scenario.BuildGang(scenario.GangSpec{Name: fmt.Sprintf("small-%d", i), Pods: 3, GPUsPerPod: 1})
		if err != nil {
			b.Fatal(err)
		}
		t0 := time.Now()
		if snap, err = cache.Update(ctx, snap); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		d, u, err := placement.Place(ctx, built.Config, snap, g)
		if err != nil || d == nil {
			b.Fatalf("place: %v %+v", err, u)
		}
		t2 := time.Now()
		pg := placementtest.NewPlacedGang(g, d, claims)
		placementtest.ApplyDecision(cache, pg)
		if placed = append(placed, pg); len(placed) > 2 {
			placementtest.FinishGang(cache, placed[0])
			placed = placed[1:]
		}
		events, update, place = events+time.Since(t2), update+t1.Sub(t0), place+t2.Sub(t1)
	}
	b.ReportMetric(float64(update.Microseconds())/1000/float64(b.N), "update-ms/op")
	b.ReportMetric(float64(place.Microseconds())/1000/float64(b.N), "place-ms/op")
	b.ReportMetric(float64(events.Microseconds())/1000/float64(b.N), "events-ms/op")
	b.ReportMetric(float64(rebuild.Microseconds())/1000, "rebuild-ms")
}
