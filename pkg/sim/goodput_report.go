package sim

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"strings"

	"k8s.io/klog/v2"

	"github.com/gpufabric/gpufabric/pkg/sim/fabric"
	"github.com/gpufabric/gpufabric/pkg/sim/failures"
)

// Goodput is what failures cost one policy (Result.Goodput of a failure
// run). GPU-hours are of the gangs' GPUs; all deterministic.
type Goodput struct {
	// CapacityGPUh is the cluster's GPUs × the horizon.
	CapacityGPUh float64
	// UsefulGPUh is the work kept (done and not lost to a failure) × the
	// gang's GPUs, at full speed: the goodput.
	UsefulGPUh float64
	// ReworkGPUh: GPU time spent on work lost since the last checkpoint;
	// RestartGPUh: restart overhead; WaitGPUh: GPUs a gang held while
	// waiting for a replacement; DegradedGPUh: the extra time of kept work
	// done at the degraded speed.
	ReworkGPUh, RestartGPUh, WaitGPUh, DegradedGPUh float64
	// NodeFailures: hardware failures of up nodes (busy or idle).
	NodeFailures int
	// Interruptions of running gangs (hardware and other causes).
	Interruptions int
	// InPlace: gangs made whole again by replacements; InPlaceRestarts:
	// jobs restarted on their own nodes (non-hardware interruptions);
	// WholeRestarts: gangs sent back to the queue; NoReplacement: bounds
	// that passed; Failed: gangs failed by the Fail policy; DomainLost:
	// gangs with a member replaced outside its NVLink domain.
	InPlace, InPlaceRestarts, WholeRestarts, NoReplacement, Failed, DomainLost int
	// Completed gangs by the horizon.
	Completed int
	// Recoveries: per hardware hit of a running gang, seconds from the hit
	// to the gang placed whole again (in place or after a whole restart),
	// to the horizon when it was not; failed gangs are left out.
	Recoveries []int64
}

func (g *Goodput) add(c failures.Cost, gpus int) {
	k := float64(gpus) / 3600
	g.ReworkGPUh += c.Rework * k
	g.RestartGPUh += c.Restart * k
	g.DegradedGPUh += c.Degraded * k
}

// LostGPUh is the GPU time lost to failures: rework, restarts, waits.
func (g *Goodput) LostGPUh() float64 { return g.ReworkGPUh + g.RestartGPUh + g.WaitGPUh }

// RecoveryMin is the mean and the largest of Recoveries, in minutes.
func (g *Goodput) RecoveryMin() (mean, most float64) {
	if len(g.Recoveries) == 0 {
		return 0, 0
	}
	var sum int64
	for _, v := range g.Recoveries {
		sum += v
	}
	return round(float64(sum)/float64(len(g.Recoveries))/60, 1), round(float64(percentile(g.Recoveries, 1))/60, 1)
}

// Pct is the goodput in % of the capacity.
func (g *Goodput) Pct() float64 { return 100 * g.UsefulGPUh / max(g.CapacityGPUh, 1e-9) }

// FailureConfig is a failure run: the model, the schedule's seed and the
// policies' options.
type FailureConfig struct {
	Model  failures.Model
	Seed   uint64
	Policy FailurePolicyOptions
}

// GoodputReport is the results of the failure policies on one fabric,
// trace and failure schedule.
type GoodputReport struct {
	Fabric    string
	TotalGPUs int
	Trace     TraceConfig
	Gangs     int
	Horizon   int64
	Config    FailureConfig
	// Failures is the schedule's length; Hardware of them hardware.
	Failures, Hardware int
	Results            []*Result
}

// RunGoodput replays the trace once per failure policy, each on its own
// cluster, with the same failure schedule drawn from cfg.Seed.
func RunGoodput(ctx context.Context, f *fabric.Fabric, tr *Trace, names []string, cfg FailureConfig, opt Options) (*GoodputReport, error) {
	if err := cfg.Model.Validate(); err != nil {
		return nil, err
	}
	if opt.Timeout <= 0 {
		opt.Timeout = DefaultTimeout
	}
	if opt.Horizon <= 0 && len(tr.Gangs) > 0 {
		opt.Horizon = tr.Gangs[len(tr.Gangs)-1].Arrival
	}
	sched := failures.Schedule(cfg.Seed, cfg.Model, f.GPUs, opt.Horizon)
	rep := &GoodputReport{Fabric: f.Name, TotalGPUs: f.TotalGPUs, Trace: tr.Config, Gangs: len(tr.Gangs), Horizon: opt.Horizon,
		Config: cfg, Failures: len(sched)}
	for _, e := range sched {
		if e.Hardware {
			rep.Hardware++
		}
	}
	for _, name := range names {
		p, rec, err := NewFailurePolicy(name, f, cfg.Policy)
		if err != nil {
			return nil, err
		}
		o := opt
		o.Failures = &Failures{Model: cfg.Model, Schedule: sched, Recovery: rec}
		res, err := Run(ctx, f, tr, p, o)
		if err != nil {
			return nil, fmt.Errorf("run %s: %w", name, err)
		}
		res.Policy = name
		klog.FromContext(ctx).V(2).Info("Failure policy done", "policy", name, "goodputPct", res.Goodput.Pct())
		rep.Results = append(rep.Results, res)
	}
	return rep, nil
}

// Markdown writes the header lines and the goodput table (deterministic:
// no wall-clock column).
func (rep *GoodputReport) Markdown(w io.Writer) error {
	m := rep.Config.Model
	var b strings.Builder
	fmt.Fprintf(&b, "Fabric: %s (%d GPUs). Trace: seed %d, %d gangs, load %.2f, mean duration %.0f s, horizon %.1f h.\n",
		rep.Fabric, rep.TotalGPUs, rep.Trace.Seed, rep.Gangs, rep.Trace.Load, rep.Trace.MeanDuration, float64(rep.Horizon)/3600)
	fmt.Fprintf(&b, "Failures: seed %d, %.3g interruptions per GPU-hour × %g, %.0f%% hardware: %d interruptions (%d hardware); repair %.1f h, checkpoint every %d min, restart %d min, degraded speed %.2f; replacement bound %d s, spares %d per domain, member-loss policy %s.\n\n",
		rep.Config.Seed, m.PerGPUHour, m.Scale, 100*m.HardwareShare, rep.Failures, rep.Hardware, float64(m.RepairTime)/3600,
		m.CheckpointInterval/60, m.RestartOverhead/60, m.DegradedSpeed, cmp.Or(rep.Config.Policy.ReplacementTimeout, DefaultReplacementTimeout),
		cmp.Or(rep.Config.Policy.Spares, DefaultSpares), cmp.Or(rep.Config.Policy.OnLoss, OnLossRestart))
	b.WriteString("| policy | goodput (GPU-h) | % of capacity | lost to failures (GPU-h): all = rework + restart + wait | degraded (GPU-h) | jobs hit | replaced in place / restarted in place / whole restarts | bound passed / failed | gangs that lost their NVLink domain | hit to whole again, mean / max (min) | completed |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range rep.Results {
		g := r.Goodput
		rm, rx := g.RecoveryMin()
		fmt.Fprintf(&b, "| %s | %.0f | %.2f%% | %.0f = %.0f + %.0f + %.0f | %.0f | %d | %d / %d / %d | %d / %d | %d | %.1f / %.1f | %d |\n",
			r.Policy, g.UsefulGPUh, g.Pct(), g.LostGPUh(), g.ReworkGPUh, g.RestartGPUh, g.WaitGPUh, g.DegradedGPUh,
			g.Interruptions, g.InPlace, g.InPlaceRestarts, g.WholeRestarts, g.NoReplacement, g.Failed, g.DomainLost, rm, rx, g.Completed)
	}
	_, err := io.WriteString(w, b.String())
	return err
}
