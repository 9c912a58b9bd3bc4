package failures

import "math"

// Progress is one job's work: Work seconds done (at full speed) when the
// current segment began at Start; the first Overhead seconds of the
// segment do no work, then work runs at Speed per second.
type Progress struct {
	Work     float64
	Start    int64
	Overhead int64
	Speed    float64
}

// At is the work done by t (t ≥ Start).
func (p Progress) At(t int64) float64 {
	return p.Work + float64(max(0, t-p.Start-p.Overhead))*p.Speed
}

// EndAt is when a job of duration seconds of work finishes if nothing
// interrupts it.
func (p Progress) EndAt(duration int64) int64 {
	left := max(0, float64(duration)-p.Work)
	return p.Start + p.Overhead + int64(math.Ceil(left/p.Speed-1e-9))
}

// Cost is what a segment cost, in seconds of the job's GPUs (multiply by
// its GPUs for GPU-seconds).
type Cost struct {
	// Rework: time spent on work lost since the last checkpoint.
	Rework float64
	// Restart: restart overhead spent.
	Restart float64
	// Degraded: time the kept work took beyond full speed.
	Degraded float64
}

// Add sums two costs.
func (c Cost) Add(o Cost) Cost {
	return Cost{c.Rework + o.Rework, c.Restart + o.Restart, c.Degraded + o.Degraded}
}

// Interrupt ends the segment at t with a failure: the work since the last
// checkpoint (a multiple of interval) is lost. It returns the work kept
// and the segment's cost. Work done before the segment is checkpointed
// (Work is always a checkpoint or 0 when a segment begins after a
// failure).
func (p Progress) Interrupt(t, interval int64) (float64, Cost) {
	elapsed := max(0, t-p.Start)
	over := min(elapsed, p.Overhead)
	done := p.At(t)
	kept := math.Floor(done/float64(interval)) * float64(interval)
	kept = max(kept, math.Min(p.Work, done))
	lost := done - kept
	gained := done - p.Work - lost // kept work done in this segment
	return kept, Cost{
		Rework:   lost / p.Speed,
		Restart:  float64(over),
		Degraded: gained/p.Speed - gained,
	}
}

// Stop ends the segment at t without a failure (completion, the horizon):
// all work so far is kept.
func (p Progress) Stop(t int64) (float64, Cost) {
	over := min(max(0, t-p.Start), p.Overhead)
	done := p.At(t)
	gained := done - p.Work
	return done, Cost{Restart: float64(over), Degraded: gained/p.Speed - gained}
}
