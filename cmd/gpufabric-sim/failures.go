package main

import (
	"context"
	"flag"
	"os"
	"strings"
	"time"

	"github.com/gpufabric/gpufabric/pkg/sim"
	"github.com/gpufabric/gpufabric/pkg/sim/fabric"
	"github.com/gpufabric/gpufabric/pkg/sim/failures"
)

// failureFlags are the flags of --failures runs (goodput under failures).
type failureFlags struct {
	on                        bool
	seed                      uint64
	rate, scale, share, speed float64
	repair, interval, restart time.Duration
	spares                    int
	timeout                   time.Duration
	onLoss, policies          string
}

func (ff *failureFlags) add(fs *flag.FlagSet) {
	d := failures.Default()
	fs.BoolVar(&ff.on, "failures", false, "inject failures and compare the failure policies' goodput instead of the placement table")
	fs.Uint64Var(&ff.seed, "failure-seed", 1, "failure schedule seed (the same schedule for every policy)")
	fs.Float64Var(&ff.rate, "failure-rate", d.PerGPUHour, "interruptions per GPU-hour (default: Llama 3 405B, 419 in 54 days on 16,384 GPUs)")
	fs.Float64Var(&ff.scale, "failure-scale", 1, "multiplies --failure-rate (1: the published rate)")
	fs.Float64Var(&ff.share, "hardware-share", d.HardwareShare, "share of interruptions that take their node out (hardware)")
	fs.DurationVar(&ff.repair, "repair-time", failures.DefaultRepairTime, "how long a node hit by a hardware failure stays out")
	fs.DurationVar(&ff.interval, "checkpoint-interval", failures.DefaultCheckpointInterval, "work between two checkpoints of a job")
	fs.DurationVar(&ff.restart, "restart-overhead", failures.DefaultRestartOverhead, "time from a job's (re)placement to useful work again")
	fs.Float64Var(&ff.speed, "degraded-speed", d.DegradedSpeed, "speed of a job with a member replaced outside its NVLink domain, in (0, 1]")
	fs.IntVar(&ff.spares, "spare-nodes-per-domain", sim.DefaultSpares, "gpufabric-spares: wholly free nodes per NVLink domain kept from new gangs")
	fs.DurationVar(&ff.timeout, "replacement-timeout", sim.DefaultReplacementTimeout*time.Second, "gpufabric: bound on waiting for a replacement in the domain")
	fs.StringVar(&ff.onLoss, "member-loss-policy", string(sim.OnLossRestart), "gpufabric past the bound: Wait, Restart or Fail")
	fs.StringVar(&ff.policies, "failure-policies", strings.Join(sim.FailurePolicyNames(), ","), "failure policies to run")
}

func (ff *failureFlags) config(key string) sim.FailureConfig {
	m := failures.Default()
	m.PerGPUHour, m.Scale, m.HardwareShare, m.DegradedSpeed = ff.rate, ff.scale, ff.share, ff.speed
	m.RepairTime, m.CheckpointInterval, m.RestartOverhead = secs(ff.repair), secs(ff.interval), secs(ff.restart)
	return sim.FailureConfig{Model: m, Seed: ff.seed, Policy: sim.FailurePolicyOptions{
		Key: key, Spares: ff.spares, ReplacementTimeout: secs(ff.timeout), OnLoss: sim.OnLoss(ff.onLoss),
	}}
}

func secs(d time.Duration) int64 { return int64(d / time.Second) }

// runFailures prints the goodput table.
func runFailures(ctx context.Context, f flags, fab *fabric.Fabric, tr *sim.Trace) error {
	rep, err := sim.RunGoodput(ctx, fab, tr, strings.Split(f.fail.policies, ","), f.fail.config(f.key),
		sim.Options{Horizon: f.horizon, Timeout: f.timeout})
	if err != nil {
		return err
	}
	return rep.Markdown(os.Stdout)
}
