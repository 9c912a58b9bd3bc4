package placement_test

import (
	"context"
	"github.com/gpufabric/gpufabric/pkg/gang/placement/scenario"
	"runtime"
	"testing"
	"time"

	"github.com/gpufabric/gpufabric/pkg/gang/placement"
	"github.com/gpufabric/gpufabric/pkg/gang/placement/index"
	"github.com/gpufabric/gpufabric/pkg/topology"
)

// BenchmarkFirstGang is the first gang a scheduler process places: a
// 3-pod one-GPU gang on a new snapshot of the 5,000-node cluster with an
// empty MatchCache, placed cold (the snapshot's first Place builds the
// CEL matches and level indexes) and, in the same iteration, on a second
// such snapshot after Warm (as the scheduler does once its informers
// sync). Reports the thread CPU of each: cold-place-ms against
// warm-ms + warmed-place-ms.
func BenchmarkFirstGang(b *testing.B) {
	ctx := context.Background()
	runtime.LockOSThread() // threadCPU measures this thread
	defer runtime.UnlockOSThread()
	built := buildBench(b, 5000, 1)
	var cold, warm, warmed time.Duration
	for b.Loop() {
		g, _, err := scenario.BuildGang(scenario.GangSpec{Name: "first", Pods: 3, GPUsPerPod: 1})
		if err != nil {
			b.Fatal(err)
		}
		for _, warmUp := range []bool{false, true} {
			cfg := built.Config
			cfg.Index.MatchCache = index.NewMatchCache()
			snap, err := index.NewSnapshot(ctx, cfg.Index, built.Input)
			if err != nil {
				b.Fatal(err)
			}
			c0 := threadCPU()
			if warmUp {
				if n, err := snap.Warm(ctx, []string{topology.GPUDeviceClass}); err != nil || n != 1 {
					b.Fatalf("warm: %d %v", n, err)
				}
				warm += threadCPU() - c0
				c0 = threadCPU()
			}
			if d, u, err := placement.Place(ctx, cfg, snap, g); err != nil || d == nil {
				b.Fatalf("place: %v %+v", err, u)
			}
			if warmUp {
				warmed += threadCPU() - c0
			} else {
				cold += threadCPU() - c0
			}
		}
	}
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 / float64(b.N) }
	b.ReportMetric(ms(cold), "cold-place-ms")
	b.ReportMetric(ms(warm), "warm-ms")
	b.ReportMetric(ms(warmed), "warmed-place-ms")
}
