package peer

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// trapCount is the number of trees of w in the trap's order.
func (w peerWorkload) trapCount() int {
	n := 0
	for g := range w.gangs {
		if w.tree.trapped(g) {
			n++
		}
	}
	return n
}

// describe renders a run's trees for the log: how many were placed, of
// the trap's order, inside their domains, and per placed tree the seconds
// from the first create (start) to its last pod bound.
func (r treeRun) describe(w peerWorkload, start time.Time) string {
	var per []string
	for _, at := range r.boundAt {
		per = append(per, fmt.Sprintf("%.2f", at.Sub(start).Seconds()))
	}
	trap := ""
	if w.tree.trap {
		trap = fmt.Sprintf(" (%d/%d of the trap's order)", r.trapPlaced, w.trapCount())
	}
	why := ""
	if r.why != "" {
		why = "; the leaves not scheduled say: " + r.why
	}
	return fmt.Sprintf("%d/%d trees placed%s, %d with every child in one NVLink domain and the tree in one leaf; per placed tree, s from the first create to its last pod bound: %s%s",
		r.placed, w.gangs, trap, r.within, strings.Join(per, " "), why)
}

// lastBound is when the last placed tree's last pod was bound (zero when
// none was placed).
func (r treeRun) lastBound() time.Time {
	var last time.Time
	for _, at := range r.boundAt {
		if at.After(last) {
			last = at
		}
	}
	return last
}

// treeReport reports BenchmarkPeer's tree metrics, means over the runs,
// per tree workload and scheduler: <workload>-<scheduler>-placed-% (trees
// whose pods all bound, of all; every tree of the workloads has a
// placement), -trap-placed-% (of the trees in the trap's order), -tree-s
// (first create → a placed tree's last pod bound, over the placed trees),
// -placed-s (first create → the last placed tree bound) and -domains-%
// (placed trees with every child in one NVLink domain and the tree in one
// leaf, of the placed).
func treeReport(b *testing.B, schedulers []peerScheduler, workloads []peerWorkload, results map[string][]peerResult) {
	for _, w := range workloads {
		if w.tree == nil {
			continue
		}
		for _, s := range schedulers {
			rs := results[w.name+"/"+s.process]
			var placed, trap, perTree, last, domains float64
			trees, placedRuns := 0, 0
			for _, r := range rs {
				placed += float64(r.trees.placed) / float64(w.gangs)
				if n := w.trapCount(); n > 0 {
					trap += float64(r.trees.trapPlaced) / float64(n)
				}
				for _, at := range r.trees.boundAt {
					perTree += at.Sub(r.start).Seconds()
					trees++
				}
				if r.trees.placed > 0 {
					last += r.trees.lastBound().Sub(r.start).Seconds()
					domains += float64(r.trees.within) / float64(r.trees.placed)
					placedRuns++
				}
			}
			n := float64(len(rs))
			if n == 0 {
				continue
			}
			prefix := w.name + "-" + s.short()
			b.ReportMetric(100*placed/n, prefix+"-placed-%")
			if w.tree.trap {
				b.ReportMetric(100*trap/n, prefix+"-trap-placed-%")
			}
			if trees > 0 {
				b.ReportMetric(perTree/float64(trees), prefix+"-tree-s")
				b.ReportMetric(last/float64(placedRuns), prefix+"-placed-s")
				b.ReportMetric(100*domains/float64(placedRuns), prefix+"-domains-%")
			}
		}
		treeRatios(b, w, schedulers, results)
	}
}

// treeRatios logs kube-scheduler's time to the last placed tree and CPU
// over gpufabric-scheduler's, means of the same runs.
func treeRatios(b *testing.B, w peerWorkload, schedulers []peerScheduler, results map[string][]peerResult) {
	gf, kube := peerSchedulers[0], peerSchedulers[1]
	if !slices.Contains(schedulers, gf) || !slices.Contains(schedulers, kube) {
		return
	}
	mean := func(s peerScheduler, f func(peerResult) float64) float64 {
		rs, sum := results[w.name+"/"+s.process], 0.0
		for _, r := range rs {
			sum += f(r)
		}
		return sum / float64(max(1, len(rs)))
	}
	placedS := func(r peerResult) float64 {
		if r.trees.placed == 0 {
			return 0
		}
		return r.trees.lastBound().Sub(r.start).Seconds()
	}
	cpu := func(r peerResult) float64 { return r.cpu.Seconds() }
	if g := mean(gf, placedS); g > 0 {
		b.Logf("%s: first create to the last placed tree bound, kube-scheduler / gpufabric-scheduler = %.2f / %.2f s = %.1f×", w.name, mean(kube, placedS), g, mean(kube, placedS)/g)
	}
	if g := mean(gf, cpu); g > 0 {
		b.Logf("%s: scheduler CPU over the run, kube-scheduler / gpufabric-scheduler = %.2f / %.2f s = %.1f×", w.name, mean(kube, cpu), g, mean(kube, cpu)/g)
	}
}
