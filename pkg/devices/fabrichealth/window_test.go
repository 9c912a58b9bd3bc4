package fabrichealth

import (
	"math"
	"testing"
	"time"
)

func rd(dev, counter string, link int, v uint64) Reading {
	return Reading{Device: dev, Counter: counter, Link: link, Value: v}
}

func TestIncrease(t *testing.T) {
	for _, tc := range []struct {
		name            string
		prev, cur, want uint64
	}{
		{"rise", 10, 15, 5},
		{"flat", 7, 7, 0},
		{"reset to zero", 100, 0, 0},
		{"reset then rise", 100, 3, 3},
		{"wrap of a 64-bit counter", math.MaxUint64 - 1, 2, 2},
	} {
		if got := Increase(tc.prev, tc.cur); got != tc.want {
			t.Errorf("%s: Increase(%d, %d) = %d, want %d", tc.name, tc.prev, tc.cur, got, tc.want)
		}
	}
}

// step is one Observe call, minutes after the start, and what it must
// return for gpu-0.
type step struct {
	min     int
	sample  []Reading
	want    Health
	devices int
}

func TestTrackerWindow(t *testing.T) {
	cfg := Config{Window: 10 * time.Minute, Threshold: 10}
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"first reading is a baseline", []step{
			{0, []Reading{rd("gpu-0", NVLinkReplay, 0, 500)}, Health{}, 1},
		}},
		{"rise below the threshold", []step{
			{0, []Reading{rd("gpu-0", NVLinkReplay, 0, 5)}, Health{}, 1},
			{1, []Reading{rd("gpu-0", NVLinkReplay, 0, 9)}, Health{Errors: 4, Counter: NVLinkReplay, Increase: 4}, 1},
		}},
		{"links and counters add up and taint", []step{
			{0, []Reading{rd("gpu-0", NVLinkReplay, 0, 0), rd("gpu-0", NVLinkReplay, 1, 0), rd("gpu-0", NVLinkCRCFlit, 0, 0)}, Health{}, 1},
			{1, []Reading{rd("gpu-0", NVLinkReplay, 0, 3), rd("gpu-0", NVLinkReplay, 1, 3), rd("gpu-0", NVLinkCRCFlit, 0, 4)},
				Health{Errors: 10, Counter: NVLinkReplay, Increase: 6, Tainted: true}, 1},
		}},
		{"increases leave the window", []step{
			{0, []Reading{rd("gpu-0", NVLinkReplay, 0, 0)}, Health{}, 1},
			{1, []Reading{rd("gpu-0", NVLinkReplay, 0, 20)}, Health{Errors: 20, Counter: NVLinkReplay, Increase: 20, Tainted: true}, 1},
			{5, []Reading{rd("gpu-0", NVLinkReplay, 0, 22)}, Health{Errors: 22, Counter: NVLinkReplay, Increase: 22, Tainted: true}, 1},
			{11, []Reading{rd("gpu-0", NVLinkReplay, 0, 22)}, Health{Errors: 2, Counter: NVLinkReplay, Increase: 2}, 1},
			{16, []Reading{rd("gpu-0", NVLinkReplay, 0, 22)}, Health{}, 1},
		}},
		{"reset counts the new value", []step{
			{0, []Reading{rd("gpu-0", NVLinkRecovery, 0, 1000)}, Health{}, 1},
			{1, []Reading{rd("gpu-0", NVLinkRecovery, 0, 4)}, Health{Errors: 4, Counter: NVLinkRecovery, Increase: 4}, 1},
		}},
		{"a counter that disappears is forgotten and re-baselined", []step{
			{0, []Reading{rd("gpu-0", NVLinkReplay, 0, 0)}, Health{}, 1},
			{1, []Reading{rd("gpu-0", NVLinkReplay, 0, 8)}, Health{Errors: 8, Counter: NVLinkReplay, Increase: 8}, 1},
			{2, nil, Health{}, 0},
			{3, []Reading{rd("gpu-0", NVLinkReplay, 0, 50)}, Health{}, 1},
		}},
		{"other devices do not count", []step{
			{0, []Reading{rd("gpu-0", NVLinkReplay, 0, 0), rd("nic-mlx5-0", SymbolError, 1, 0)}, Health{}, 2},
			{1, []Reading{rd("gpu-0", NVLinkReplay, 0, 0), rd("nic-mlx5-0", SymbolError, 1, 99)}, Health{}, 2},
		}},
		{"tie picks the first counter by name", []step{
			{0, []Reading{rd("gpu-0", NVLinkReplay, 0, 0), rd("gpu-0", NVLinkCRCData, 0, 0)}, Health{}, 1},
			{1, []Reading{rd("gpu-0", NVLinkReplay, 0, 2), rd("gpu-0", NVLinkCRCData, 0, 2)}, Health{Errors: 4, Counter: NVLinkCRCData, Increase: 2}, 1},
		}},
		{"huge increases saturate", []step{
			{0, []Reading{rd("gpu-0", NVLinkReplay, 0, 0), rd("gpu-0", NVLinkRecovery, 0, 0)}, Health{}, 1},
			{1, []Reading{rd("gpu-0", NVLinkReplay, 0, math.MaxUint64), rd("gpu-0", NVLinkRecovery, 0, math.MaxUint64)},
				Health{Errors: math.MaxInt64, Counter: NVLinkRecovery, Increase: math.MaxInt64, Tainted: true}, 1},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := NewTracker(cfg)
			start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
			for i, s := range tc.steps {
				got := tr.Observe(start.Add(time.Duration(s.min)*time.Minute), s.sample)
				if len(got) != s.devices {
					t.Errorf("step %d: %d devices, want %d: %v", i, len(got), s.devices, got)
				}
				if got["gpu-0"] != s.want {
					t.Errorf("step %d: gpu-0 = %+v, want %+v", i, got["gpu-0"], s.want)
				}
			}
		})
	}
}

func TestTrackerThresholdZeroNeverTaints(t *testing.T) {
	tr := NewTracker(Config{Window: time.Minute})
	now := time.Now()
	tr.Observe(now, []Reading{rd("gpu-0", NVLinkReplay, 0, 0)})
	if h := tr.Observe(now.Add(time.Second), []Reading{rd("gpu-0", NVLinkReplay, 0, 1e6)})["gpu-0"]; h.Tainted || h.Errors != 1e6 {
		t.Errorf("threshold 0: %+v, want 1e6 errors, no taint", h)
	}
}

// TestTrackerMemoryBounded: a counter that rises at every one of many
// observations inside the window keeps at most maxEntries increases, and
// loses none of them.
func TestTrackerMemoryBounded(t *testing.T) {
	tr := NewTracker(Config{Window: time.Hour, Threshold: 1})
	now := time.Now()
	const steps = 1000
	for i := range steps + 1 {
		tr.Observe(now.Add(time.Duration(i)*time.Second), []Reading{rd("gpu-0", NVLinkReplay, 0, uint64(i))})
	}
	es := tr.win[winKey{"gpu-0", NVLinkReplay}]
	if len(es) > maxEntries {
		t.Errorf("%d entries kept, want at most %d", len(es), maxEntries)
	}
	if s := sum(es); s != steps {
		t.Errorf("window sums %d, want %d", s, steps)
	}
}
