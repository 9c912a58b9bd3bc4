package failures

import (
	"math"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestLlama3Rate: 419 interruptions / (54 days × 24 h × 16,384 GPUs) =
// 419 / 21,233,664 GPU-hours.
func TestLlama3Rate(t *testing.T) {
	if got, want := Llama3PerGPUHour(), 419.0/21233664; math.Abs(got-want) > 1e-15 {
		t.Errorf("rate %g per GPU-hour, want %g", got, want)
	}
	if got := Llama3PerGPUHour(); math.Abs(got-1.9733e-5) > 1e-9 {
		t.Errorf("rate %g per GPU-hour, want about 1.9733e-5", got)
	}
	m := Default()
	if m.HardwareShare != 0.78 || m.Scale != 1 {
		t.Errorf("default hardware share %g, scale %g: want the published 0.78 and 1", m.HardwareShare, m.Scale)
	}
	// 16,384 GPUs for 54 days at the default rate: 419 interruptions.
	if got := m.Rate() * 16384 * 54 * 86400; math.Abs(got-419) > 1e-6 {
		t.Errorf("interruptions on the Llama 3 cluster: %g, want 419", got)
	}
	if err := m.Validate(); err != nil {
		t.Errorf("default model invalid: %v", err)
	}
}

func TestValidate(t *testing.T) {
	for name, mut := range map[string]func(*Model){
		"negative rate":     func(m *Model) { m.PerGPUHour = -1 },
		"share above one":   func(m *Model) { m.HardwareShare = 1.5 },
		"zero interval":     func(m *Model) { m.CheckpointInterval = 0 },
		"zero speed":        func(m *Model) { m.DegradedSpeed = 0 },
		"speed above one":   func(m *Model) { m.DegradedSpeed = 1.1 },
		"negative overhead": func(m *Model) { m.RestartOverhead = -1 },
	} {
		m := Default()
		mut(&m)
		if m.Validate() == nil {
			t.Errorf("%s: model %+v accepted", name, m)
		}
	}
}

// TestSchedule: the same seed gives the same schedule, another seed
// another; the count and the hardware share are those of the rate (within
// 4 standard deviations); nodes are struck in proportion to their GPUs.
func TestSchedule(t *testing.T) {
	m := Default()
	m.Scale = 1000
	gpus := []int{4, 4, 0, 8}
	const horizon = 100 * 86400
	a, b := Schedule(7, m, gpus, horizon), Schedule(7, m, gpus, horizon)
	if diff := cmp.Diff(a, b); diff != "" {
		t.Fatalf("same seed, different schedules (-a +b):\n%s", diff)
	}
	if c := Schedule(8, m, gpus, horizon); cmp.Equal(a, c) {
		t.Errorf("seeds 7 and 8 gave the same schedule")
	}
	mean := m.Rate() * 16 * horizon // 16 GPUs
	if n := float64(len(a)); math.Abs(n-mean) > 4*math.Sqrt(mean) {
		t.Errorf("%d interruptions, want about %.0f", len(a), mean)
	}
	hw, perNode := 0, make([]int, len(gpus))
	for i, e := range a {
		if i > 0 && e.T < a[i-1].T || e.T > horizon || e.T < 0 {
			t.Fatalf("event %d at %d out of order or range", i, e.T)
		}
		perNode[e.Node]++
		if e.Hardware {
			hw++
		}
	}
	if share := float64(hw) / float64(len(a)); math.Abs(share-0.78) > 0.05 {
		t.Errorf("hardware share %.3f, want about 0.78", share)
	}
	if perNode[2] != 0 {
		t.Errorf("a node without GPUs was struck %d times", perNode[2])
	}
	if r := float64(perNode[3]) / float64(perNode[0]+perNode[1]); r < 0.8 || r > 1.25 {
		t.Errorf("the 8-GPU node was struck %d times, the 4-GPU nodes %d: want about as often as both", perNode[3], perNode[0]+perNode[1])
	}
	if s := Schedule(7, Model{}, gpus, horizon); s != nil {
		t.Errorf("rate 0: %d interruptions", len(s))
	}
}

func TestProgress(t *testing.T) {
	tests := []struct {
		name     string
		p        Progress
		t        int64
		kept     float64
		cost     Cost
		stopWork float64
		stopCost Cost
	}{{
		name: "first segment, no checkpoint yet: all work lost",
		p:    Progress{Start: 0, Speed: 1}, t: 1000,
		kept: 0, cost: Cost{Rework: 1000},
		stopWork: 1000,
	}, {
		name: "past two checkpoints: the work since the second is lost",
		p:    Progress{Start: 100, Speed: 1}, t: 100 + 2*1800 + 300,
		kept: 3600, cost: Cost{Rework: 300},
		stopWork: 3900,
	}, {
		name: "failure during the restart overhead: overhead spent, nothing lost",
		p:    Progress{Work: 1800, Start: 0, Overhead: 600, Speed: 1}, t: 200,
		kept: 1800, cost: Cost{Restart: 200},
		stopWork: 1800, stopCost: Cost{Restart: 200},
	}, {
		name: "after a restart: the overhead, then work from the checkpoint",
		p:    Progress{Work: 1800, Start: 0, Overhead: 600, Speed: 1}, t: 600 + 2000,
		kept: 3600, cost: Cost{Restart: 600, Rework: 200},
		stopWork: 3800, stopCost: Cost{Restart: 600},
	}, {
		name: "degraded: work at half speed, the kept part took twice as long",
		p:    Progress{Start: 0, Speed: 0.5}, t: 4000,
		kept: 1800, cost: Cost{Rework: 400, Degraded: 1800},
		stopWork: 2000, stopCost: Cost{Degraded: 2000},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			kept, cost := tt.p.Interrupt(tt.t, 1800)
			if kept != tt.kept || !cmp.Equal(cost, tt.cost) {
				t.Errorf("Interrupt: kept %g, cost %+v; want %g, %+v", kept, cost, tt.kept, tt.cost)
			}
			work, cost := tt.p.Stop(tt.t)
			if work != tt.stopWork || !cmp.Equal(cost, tt.stopCost) {
				t.Errorf("Stop: work %g, cost %+v; want %g, %+v", work, cost, tt.stopWork, tt.stopCost)
			}
		})
	}
	p := Progress{Work: 1800, Start: 100, Overhead: 600, Speed: 0.75}
	if got := p.EndAt(3600); got != 100+600+2400 {
		t.Errorf("EndAt: %d, want %d", got, 100+600+2400)
	}
	if got := p.At(p.EndAt(3600)); got < 3600 {
		t.Errorf("work at EndAt %g, want 3600", got)
	}
}
