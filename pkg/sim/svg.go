package sim

import (
	"fmt"
	"io"

	"github.com/gpufabric/gpufabric/pkg/sim/chart"
)

// The chart's title and the note under its legend.
const (
	chartHeldNote    = "dashed: + GPUs held by partial gangs"
	chartTitleFormat = "GPUs in running gangs (%% of %d) over simulated time — %s"
)

// SVG writes a line chart of fabric occupancy over time, one line per
// policy: the time average of GPUs in running gangs per bucket of the
// horizon, plus a dashed line including GPUs held by pods of partial gangs
// for policies that had any (pkg/sim/chart draws it).
func (rep *Report) SVG(w io.Writer) error {
	c := chart.Chart{Title: fmt.Sprintf(chartTitleFormat, rep.TotalGPUs, rep.Fabric), Hours: float64(rep.Options.Horizon) / 3600, Note: chartHeldNote}
	for _, r := range rep.Results {
		busy, held := r.buckets(chart.Buckets)
		if r.Teardowns == 0 && !anyHeld(r.Series) {
			held = nil
		}
		c.Lines = append(c.Lines, chart.Line{Name: r.Policy, Total: r.TotalGPUs, Busy: busy, Held: held})
	}
	return c.Write(w)
}

// buckets returns the time average of busy and busy+held GPUs over n equal
// buckets of [0, Horizon].
func (r *Result) buckets(n int) (busy, held []float64) {
	busy, held = make([]float64, n), make([]float64, n)
	if r.Horizon <= 0 {
		return busy, held
	}
	width := float64(r.Horizon) / float64(n)
	for i, s := range r.Series {
		end := float64(r.Horizon)
		if i+1 < len(r.Series) {
			end = float64(r.Series[i+1].T)
		}
		for t := float64(s.T); t < end; {
			k := int(t / width)
			if float64(k+1)*width <= t { // t/width rounded down across a bucket edge
				k++
			}
			next := end
			if k < n-1 {
				next = min(end, float64(k+1)*width)
			}
			k = min(k, n-1)
			busy[k] += float64(s.Busy) * (next - t) / width
			held[k] += float64(s.Busy+s.Held) * (next - t) / width
			t = next
		}
	}
	return busy, held
}

func anyHeld(s []Sample) bool {
	for _, x := range s {
		if x.Held > 0 {
			return true
		}
	}
	return false
}
