package sim

import (
	"context"
	"math/rand/v2"
	"testing"

	"github.com/gpufabric/gpufabric/pkg/sim/fabric"
	"github.com/gpufabric/gpufabric/pkg/sim/failures"
	"github.com/gpufabric/gpufabric/pkg/sim/trees"
)

// BenchmarkSim5000 replays a trace on 5,000 HGX nodes (40,000 GPUs, 16
// nodes per rack, 8 racks per leaf) with the gpufabric engine and, in the
// same run, the baselines: 1,200 gangs of 1–512 GPUs at load 2 with a
// 30-minute mean duration, so the cluster fills in the last third of the
// run and departures force snapshot rebuilds. One iteration is one whole
// replay; run it with -benchtime 1x. Reports the decision latency
// percentiles, the mean snapshot rebuild time, and the run's outcome.
func BenchmarkSim5000(b *testing.B) {
	f, err := fabric.Generate(fabric.Spec{Kind: fabric.KindHGX, Size: 5000})
	if err != nil {
		b.Fatal(err)
	}
	cfg := DefaultTraceConfig(1, f)
	cfg.Gangs, cfg.Load, cfg.MeanDuration = 1200, 2, 1800
	tr, err := GenerateTrace(cfg)
	if err != nil {
		b.Fatal(err)
	}
	for _, name := range []string{PolicyGPUFabric, PolicyFirstFit, PolicyTAS, PolicyBestFit} {
		b.Run(name, func(b *testing.B) {
			var res *Result
			for b.Loop() {
				p, err := NewPolicy(name, f, PolicyOptions{Key: fabric.LabelLeaf})
				if err != nil {
					b.Fatal(err)
				}
				if res, err = Run(context.Background(), f, tr, p, Options{}); err != nil {
					b.Fatal(err)
				}
			}
			s := res.Summary()
			b.ReportMetric(s.LatP50ms, "p50-ms")
			b.ReportMetric(s.LatP99ms, "p99-ms")
			b.ReportMetric(float64(s.Decisions), "decisions")
			if res.Syncs > 0 {
				b.ReportMetric(float64(res.SyncTime.Milliseconds())/float64(res.Syncs), "rebuild-ms")
				b.ReportMetric(float64(res.Syncs), "rebuilds")
			}
			b.ReportMetric(float64(s.Placed), "placed")
			b.ReportMetric(s.BusyPct, "busy-%")
			b.ReportMetric(s.AllocAtRefusalPct, "alloc-at-refusal-%")
		})
	}
}

// BenchmarkGoodput is one failure run per failure policy on 8 NVL72
// domains (576 GPUs): 400 gangs of a day's mean duration at load 1.3 with
// failures at 10× the published rate. One iteration is one whole replay;
// run it with -benchtime 1x. Reports the run's goodput and interruptions.
func BenchmarkGoodput(b *testing.B) {
	f, err := fabric.Generate(fabric.Spec{Kind: fabric.KindNVL72, Size: 8, RacksPerLeaf: 4})
	if err != nil {
		b.Fatal(err)
	}
	cfg := DefaultTraceConfig(1, f)
	cfg.Gangs, cfg.MeanDuration = 400, 86400
	tr, err := GenerateTrace(cfg)
	if err != nil {
		b.Fatal(err)
	}
	fc := FailureConfig{Model: failures.Default(), Seed: 1}
	fc.Model.Scale = 10
	for _, name := range FailurePolicyNames() {
		b.Run(name, func(b *testing.B) {
			var rep *GoodputReport
			for b.Loop() {
				if rep, err = RunGoodput(context.Background(), f, tr, []string{name}, fc, Options{}); err != nil {
					b.Fatal(err)
				}
			}
			g := rep.Results[0].Goodput
			b.ReportMetric(g.Pct(), "goodput-%")
			b.ReportMetric(float64(g.Interruptions), "hits")
		})
	}
}

// BenchmarkTreeDecision is one tree decision per policy on the default
// fabric (32 NVL72 racks, 4 leaves), empty: the largest default training
// job (8 segments of 64 GPUs, each in one NVLink domain, all in one leaf)
// and the largest default service (a frontend, 16 prefill and 32 decode
// pods of 2 GPUs in one leaf). The engine's snapshot rebuild after each
// release is outside the timer.
func BenchmarkTreeDecision(b *testing.B) {
	f, err := fabric.Generate(fabric.Spec{Kind: fabric.KindNVL72, Size: 32})
	if err != nil {
		b.Fatal(err)
	}
	cfg := DefaultTraceConfig(1, f)
	if err := cfg.WithTrees(f, TreeOptions{Share: 1, InferenceShare: 0.5}); err != nil {
		b.Fatal(err)
	}
	m := cfg.Trees
	job := m.Training[len(m.Training)-1]
	svc := m.Inference[len(m.Inference)-1]
	shapes := map[string]*trees.Mix{
		"training-512": {Share: 1, SegmentKey: m.SegmentKey, GroupKey: m.GroupKey, Training: []trees.TrainingShape{job}, Fit: m.Fit},
		"service-97":   {Share: 1, InferenceShare: 1, SegmentKey: m.SegmentKey, GroupKey: m.GroupKey, Inference: []trees.InferenceShape{svc}, Fit: m.Fit},
	}
	ctx := context.Background()
	for _, shape := range []string{"training-512", "service-97"} {
		g := TraceGang{ID: 1, Duration: 60, Tree: shapes[shape].Draw(rand.New(rand.NewPCG(1, 1)))}
		for _, name := range []string{PolicyGPUFabric, PolicyTAS, PolicyBestFit} {
			b.Run(shape+"/"+name, func(b *testing.B) {
				p, err := NewPolicy(name, f, PolicyOptions{Key: fabric.LabelLeaf})
				if err != nil {
					b.Fatal(err)
				}
				c := NewCluster(f)
				nodes := make([]int, len(g.PodGPUs()))
				for b.Loop() {
					b.StopTimer()
					if sy, ok := p.(Syncer); ok {
						if _, err := sy.Sync(ctx); err != nil {
							b.Fatal(err)
						}
					}
					for i := range nodes {
						nodes[i] = -1
					}
					b.StartTimer()
					out, err := p.Place(ctx, c, g, nodes)
					if err != nil || out == nil {
						b.Fatalf("%s: %v, placed %v", name, err, out != nil)
					}
					b.StopTimer()
					if _, ok := p.(Syncer); ok {
						if err := p.Release(ctx, g.ID); err != nil {
							b.Fatal(err)
						}
					}
					b.StartTimer()
				}
			})
		}
	}
}
