package placement_test

import (
	"context"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/gpufabric/gpufabric/pkg/gang/placement"
	"github.com/gpufabric/gpufabric/pkg/gang/placement/index"
	"github.com/gpufabric/gpufabric/pkg/gang/placement/scenario"
)

// BenchmarkSegmentedGang128 places a 128-pod gang with 4 GPUs per pod on
// the 5,000-node HGX cluster (40,000 GPUs, 50% busy) in segments of 16
// pods, each in one rack; BenchmarkFlatGang128 is the same gang without
// segments. Reports p50/p99 latency and this thread's CPU time of Place,
// the Allocate calls and the segment bins verified.
func BenchmarkSegmentedGang128(b *testing.B) {
	benchSegments(b, scenario.GangSpec{Name: "seg", Pods: 128, GPUsPerPod: 4, SegmentSize: 16, SegmentTopologyKey: "rack"})
}

// BenchmarkSegmentedGang128by8 is the same gang in segments of 8 pods per
// rack, which most spines hold.
func BenchmarkSegmentedGang128by8(b *testing.B) {
	benchSegments(b, scenario.GangSpec{Name: "seg8", Pods: 128, GPUsPerPod: 4, SegmentSize: 8, SegmentTopologyKey: "rack"})
}

func BenchmarkFlatGang128(b *testing.B) {
	benchSegments(b, scenario.GangSpec{Name: "flat", Pods: 128, GPUsPerPod: 4})
}

func benchSegments(b *testing.B, gs scenario.GangSpec) {
	ctx := context.Background()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	built := buildBench(b, 5000, 1, gs)
	snap, err := index.NewSnapshot(ctx, built.Config.Index, built.Input)
	if err != nil {
		b.Fatal(err)
	}
	if d, u, err := placement.Place(ctx, built.Config, snap, built.Gangs[0]); err != nil || d == nil {
		b.Fatalf("warm-up: %v %+v", err, u)
	}
	var lat, cpu []time.Duration
	var st placement.Stats
	var where string
	b.ResetTimer()
	for b.Loop() {
		t0, c0 := time.Now(), threadCPU()
		d, u, err := placement.Place(ctx, built.Config, snap, built.Gangs[0])
		lat, cpu = append(lat, time.Since(t0)), append(cpu, threadCPU()-c0)
		if err != nil || d == nil {
			b.Fatalf("place: %v %+v", err, u)
		}
		st, where = d.Stats, d.TopologyKey+" "+d.Domain
	}
	slices.Sort(lat)
	slices.Sort(cpu)
	b.ReportMetric(percentile(lat, 0.5), "p50-ms")
	b.ReportMetric(percentile(lat, 0.99), "p99-ms")
	if cpu[len(cpu)-1] > 0 {
		b.ReportMetric(percentile(cpu, 0.5), "p50-cpu-ms")
	}
	b.ReportMetric(float64(st.AllocateCalls), "allocate-calls")
	b.ReportMetric(float64(st.SegmentPlaces), "segment-bins")
	b.ReportMetric(float64(st.DomainsVerified), "domains-verified")
	b.Logf("placed in %s", where)
}
