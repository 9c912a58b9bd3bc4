package sim

import (
	"fmt"
	"io"
	"strings"
)

// LargeGPUs is the smallest gang the report's large-gang table counts.
const LargeGPUs = 256

func (r *Result) sizeWait(gpus int, wait int64, placed bool) {
	if r.SizeWaits == nil {
		r.SizeWaits, r.SizePlaced = map[int][]int64{}, map[int]int{}
	}
	r.SizeWaits[gpus] = append(r.SizeWaits[gpus], wait)
	if placed {
		r.SizePlaced[gpus]++
	}
}

// SizeSummary is how gangs of at least some size fared.
type SizeSummary struct {
	Placed, Gangs           int
	WaitP50Min, WaitP99Min  float64
	WaitMeanMin, WaitMaxMin float64
}

// Sizes summarizes the gangs of at least minGPUs GPUs (placed ones and
// those still waiting at the horizon).
func (r *Result) Sizes(minGPUs int) SizeSummary {
	var s SizeSummary
	var waits []int64
	var sum int64
	for gpus, ws := range r.SizeWaits {
		if gpus < minGPUs {
			continue
		}
		s.Placed += r.SizePlaced[gpus]
		waits = append(waits, ws...)
		for _, w := range ws {
			sum += w
		}
	}
	s.Gangs = len(waits)
	if len(waits) > 0 {
		s.WaitP50Min = round(float64(percentile(waits, 0.5))/60, 1)
		s.WaitP99Min = round(float64(percentile(waits, 0.99))/60, 1)
		s.WaitMaxMin = round(float64(percentile(waits, 1))/60, 1)
		s.WaitMeanMin = round(float64(sum)/float64(len(waits))/60, 1)
	}
	return s
}

// LargeGangs writes the large-gang table: how the gangs of LargeGPUs or
// more waited under each policy, beside the busy GPUs.
func (rep *Report) LargeGangs(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "\nGangs of %d GPUs or more (arrived by the horizon; waits of those still waiting count to the horizon):\n\n", LargeGPUs)
	b.WriteString("| policy | placed | wait mean / p50 / p99 / max (min) | busy GPUs |\n|---|---|---|---|\n")
	for _, r := range rep.Results {
		s := r.Sizes(LargeGPUs)
		fmt.Fprintf(&b, "| %s | %d / %d | %.1f / %.1f / %.1f / %.1f | %.1f%% |\n",
			r.Policy, s.Placed, s.Gangs, s.WaitMeanMin, s.WaitP50Min, s.WaitP99Min, s.WaitMaxMin, round(r.BusyPct, 1))
	}
	_, err := io.WriteString(w, b.String())
	return err
}
