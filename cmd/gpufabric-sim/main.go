// Command gpufabric-sim replays a trace of gang arrivals and departures on a
// generated (or loaded) fabric with the gpufabric placement engine and the
// baseline policies, and prints a markdown table; with --failures it
// injects failures at published rates and prints each failure policy's
// goodput instead. See docs/benchmarks.md.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"

	"k8s.io/klog/v2"

	"github.com/gpufabric/gpufabric/pkg/component/logging"
	"github.com/gpufabric/gpufabric/pkg/component/version"
	"github.com/gpufabric/gpufabric/pkg/sim"
	"github.com/gpufabric/gpufabric/pkg/sim/fabric"
)

type flags struct {
	seed                   uint64
	fabric, fabricFile     string
	size, perRack, perLeaf int
	gangs                  int
	load, duration         float64
	treeShare, inferShare  float64
	treeCoupling           string
	traceIn, traceOut      string
	svgOut, policies, key  string
	bestKey                bool
	starvation             int64
	horizon, timeout       int64
	fail                   failureFlags
}

func main() {
	var f flags
	flag.Uint64Var(&f.seed, "seed", 1, "trace seed")
	flag.StringVar(&f.fabric, "fabric", fabric.KindNVL72, "generated fabric: nvl72 or hgx")
	flag.StringVar(&f.fabricFile, "fabric-file", "", "YAML file with levels, nodes and resourceSlices (instead of --fabric)")
	flag.IntVar(&f.size, "size", 32, "NVL72 domains (nvl72) or nodes (hgx)")
	flag.IntVar(&f.perRack, "nodes-per-rack", 16, "hgx: nodes per rack")
	flag.IntVar(&f.perLeaf, "racks-per-leaf", 8, "racks per IB leaf")
	flag.IntVar(&f.gangs, "gangs", 600, "gangs in a generated trace")
	flag.Float64Var(&f.load, "load", 1.3, "offered load of a generated trace")
	flag.Float64Var(&f.duration, "mean-duration", 3600, "mean gang duration in seconds")
	flag.Float64Var(&f.treeShare, "tree-share", 0, "share of a generated trace's jobs that are tree jobs (segmented training jobs, inference services; 0: none)")
	flag.Float64Var(&f.inferShare, "tree-inference-share", 0.5, "share of the tree jobs that are inference services (the rest: segmented training jobs)")
	flag.StringVar(&f.treeCoupling, "tree-rail-coupling", "required", "how an inference service's prefill and decode ask for one set of IB rails: required or preferred")
	flag.StringVar(&f.traceIn, "trace-in", "", "replay this trace instead of generating one")
	flag.StringVar(&f.traceOut, "trace-out", "", "save the trace (YAML)")
	flag.StringVar(&f.svgOut, "svg", "", "write the occupancy chart (SVG) here")
	flag.StringVar(&f.policies, "policies", strings.Join(sim.PolicyNames(), ","), "policies to run")
	flag.StringVar(&f.key, "key", fabric.LabelLeaf, "node-label level of the TAS and BestFit baselines")
	flag.BoolVar(&f.bestKey, "best-key", true, "also run the TAS and BestFit baselines at every level and report each at its best, the --key variant beside it")
	flag.Int64Var(&f.starvation, "starvation-bound", sim.DefaultStarvationBound, "gpufabric-reserve: seconds a gang waits before it holds the domain closest to fitting it")
	flag.Int64Var(&f.horizon, "horizon", 0, "end of the run in simulated seconds (0: last arrival)")
	flag.Int64Var(&f.timeout, "timeout", sim.DefaultTimeout, "teardown timeout of partial gangs (pod-first-fit), seconds")
	f.fail.add(flag.CommandLine)
	showVersion := flag.Bool("version", false, "print the version and exit")
	logOpts, err := logging.AddFlags(flag.CommandLine, "", nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, "gpufabric-sim:", err)
		os.Exit(2)
	}
	flag.Parse()
	if *showVersion {
		fmt.Print(version.Get().Line("gpufabric-sim"))
		return
	}
	if err := logOpts.Apply(); err != nil {
		fmt.Fprintln(os.Stderr, "gpufabric-sim:", err)
		os.Exit(2)
	}
	ctx := klog.NewContext(context.Background(), klog.Background())
	if err := run(ctx, f); err != nil {
		fmt.Fprintln(os.Stderr, "gpufabric-sim:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, f flags) error {
	var fab *fabric.Fabric
	var err error
	if f.fabricFile != "" {
		fab, err = fabric.Load(f.fabricFile)
	} else {
		fab, err = fabric.Generate(fabric.Spec{Kind: f.fabric, Size: f.size, NodesPerRack: f.perRack, RacksPerLeaf: f.perLeaf})
	}
	if err != nil {
		return err
	}
	var tr *sim.Trace
	if f.traceIn != "" {
		tr, err = sim.LoadTrace(f.traceIn)
	} else {
		cfg := sim.DefaultTraceConfig(f.seed, fab)
		cfg.Gangs, cfg.Load, cfg.MeanDuration = f.gangs, f.load, f.duration
		if err := cfg.WithTrees(fab, sim.TreeOptions{Share: f.treeShare, InferenceShare: f.inferShare, RailCoupling: f.treeCoupling}); err != nil {
			return err
		}
		tr, err = sim.GenerateTrace(cfg)
	}
	if err != nil {
		return err
	}
	if f.traceOut != "" {
		if err := sim.SaveTrace(f.traceOut, tr); err != nil {
			return err
		}
	}
	if f.fail.on {
		return runFailures(ctx, f, fab, tr)
	}
	rep, err := sim.RunAll(ctx, fab, tr, strings.Split(f.policies, ","), sim.PolicyOptions{Key: f.key, BestKey: f.bestKey, StarvationBound: f.starvation},
		sim.Options{Horizon: f.horizon, Timeout: f.timeout})
	if err != nil {
		return err
	}
	if err := rep.Markdown(os.Stdout); err != nil {
		return err
	}
	if err := rep.LargeGangs(os.Stdout); err != nil {
		return err
	}
	if err := rep.TreesMarkdown(os.Stdout); err != nil {
		return err
	}
	if f.svgOut == "" {
		return nil
	}
	out, err := os.Create(f.svgOut)
	if err != nil {
		return fmt.Errorf("create chart: %w", err)
	}
	if err := rep.SVG(out); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
