package sim

import (
	"context"
	"fmt"
	"io"
	"strings"

	"k8s.io/klog/v2"

	"github.com/gpufabric/gpufabric/pkg/sim/fabric"
	"github.com/gpufabric/gpufabric/pkg/sim/trees"
)

// Report is the results of several policies on one fabric and trace.
type Report struct {
	Fabric    string
	TotalGPUs int
	Trace     TraceConfig
	Gangs     int
	Options   Options
	Key       string
	Results   []*Result
}

// RunAll replays the trace once per policy, each on its own cluster.
func RunAll(ctx context.Context, f *fabric.Fabric, tr *Trace, names []string, popt PolicyOptions, opt Options) (*Report, error) {
	logger := klog.FromContext(ctx)
	if opt.Timeout <= 0 {
		opt.Timeout = DefaultTimeout
	}
	rep := &Report{Fabric: f.Name, TotalGPUs: f.TotalGPUs, Trace: tr.Config, Gangs: len(tr.Gangs), Options: opt, Key: popt.Key}
	for _, name := range names {
		keys := []string{popt.Key}
		if popt.BestKey && keyed(name) {
			keys = f.Levels
		}
		var best, flagged *Result
		for _, key := range keys {
			res, err := runOne(ctx, f, tr, name, PolicyOptions{Key: key, StarvationBound: popt.StarvationBound}, opt)
			if err != nil {
				return nil, err
			}
			rep.Options.Horizon = res.Horizon
			logger.V(2).Info("Policy done", "policy", name, "key", key, "placed", res.Placed, "decisions", len(res.Latencies), "sync", res.SyncTime)
			if key == popt.Key {
				flagged = res
			}
			if best == nil || better(res, best) {
				best = res
			}
		}
		if !keyed(name) || len(keys) == 1 {
			rep.Results = append(rep.Results, best)
			continue
		}
		best.Policy = fmt.Sprintf("%s (best key: %s)", name, best.Key)
		rep.Results = append(rep.Results, best)
		if flagged != nil && flagged != best {
			flagged.Policy = fmt.Sprintf("%s (--key %s)", name, flagged.Key)
			rep.Results = append(rep.Results, flagged)
		}
	}
	return rep, nil
}

func runOne(ctx context.Context, f *fabric.Fabric, tr *Trace, name string, popt PolicyOptions, opt Options) (*Result, error) {
	p, err := NewPolicy(name, f, popt)
	if err != nil {
		return nil, err
	}
	res, err := Run(ctx, f, tr, p, opt)
	if err != nil {
		return nil, fmt.Errorf("run %s: %w", name, err)
	}
	if keyed(name) {
		res.Key = popt.Key
	}
	if res.Trees != nil {
		res.TreesHow = treesHow(name, f)
	}
	return res, nil
}

// better: more busy GPU time, then more gangs placed.
func better(a, b *Result) bool {
	sa, sb := a.Summary(), b.Summary()
	if sa.BusyPct != sb.BusyPct {
		return sa.BusyPct > sb.BusyPct
	}
	return sa.Placed > sb.Placed
}

// Summaries returns each result's Summary.
func (rep *Report) Summaries() []Summary {
	out := make([]Summary, len(rep.Results))
	for i, r := range rep.Results {
		out[i] = r.Summary()
	}
	return out
}

// Markdown writes the header lines and the results table.
func (rep *Report) Markdown(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "Fabric: %s (%d GPUs). Trace: seed %d, %d gangs, load %.2f, mean duration %.0f s, horizon %.1f h. Baseline key: %s (TAS baselines also run at their best key); partial-gang timeout %d s.\n\n",
		rep.Fabric, rep.TotalGPUs, rep.Trace.Seed, rep.Gangs, rep.Trace.Load, rep.Trace.MeanDuration,
		float64(rep.Options.Horizon)/3600, rep.Key, rep.Options.Timeout)
	b.WriteString("| policy | gangs placed | in one NVLink domain: all / fit one / had room | adjacent ranks: same node / rack | racks per gang | NVLink domains per gang > 1 domain (fewest) | GPU alloc at 1st refusal | refusals | busy GPUs | wait mean / p99 (min) | decision p50 / p99 (ms) | decisions |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, s := range rep.Summaries() {
		refusal := fmt.Sprintf("%.1f%%", s.AllocAtRefusalPct)
		if s.NoRefusal {
			refusal = "none"
		}
		if s.Teardowns > 0 {
			refusal += fmt.Sprintf(" (%d teardowns)", s.Teardowns)
		}
		fmt.Fprintf(&b, "| %s | %d / %d | %.1f%% / %.1f%% / %.1f%% | %.1f%% / %.1f%% | %.2f | %.2f (%.2f) | %s | %d | %.1f%% | %.1f / %.1f | %.3f / %.3f | %d |\n",
			s.Policy, s.Placed, s.Gangs, s.InDomainPct, s.FitInDomainPct, s.RoomInDomainPct, s.RankSameNodePct, s.RankSameRackPct,
			s.RacksPerGang, s.BigDomains, s.BigMinDomains, refusal, s.Refusals,
			s.BusyPct, s.WaitMeanMin, s.WaitP99Min, s.LatP50ms, s.LatP99ms, s.Decisions)
	}
	for _, r := range rep.Results {
		if r.SyncTime > 0 {
			fmt.Fprintf(&b, "\n%s: %d snapshot rebuilds after departures, %.1f ms each on average (not in decision latency).",
				r.Policy, r.Syncs, float64(r.SyncTime.Microseconds())/1000/float64(max(1, r.Syncs)))
		}
	}
	b.WriteString("\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// TreesMarkdown writes the tree jobs' table (design/simulator.md,
// "Hierarchical workloads"); nothing when the trace has none.
func (rep *Report) TreesMarkdown(w io.Writer) error {
	var rows []trees.Row
	for _, r := range rep.Results {
		if r.Trees != nil {
			rows = append(rows, trees.Row{Policy: r.Policy, Config: r.TreesHow, Stats: r.Trees, BusyPct: r.Summary().BusyPct, Latencies: r.TreeLatencies,
				NoRefusals: strings.HasPrefix(r.Policy, PolicyFirstFit), KubeRule: strings.HasPrefix(r.Policy, PolicyTAS)})
		}
	}
	if len(rows) == 0 {
		return nil
	}
	s := rows[0].Stats
	if _, err := fmt.Fprintf(w, "\nTree jobs that arrived by the horizon: %d (%d segmented training jobs, %d inference services) of the trace's %d jobs.\n\n",
		s.Trees, s.Training, s.Inference, rep.Gangs); err != nil {
		return err
	}
	return trees.Markdown(w, rows)
}
