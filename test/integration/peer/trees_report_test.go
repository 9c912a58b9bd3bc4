package peer

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
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
	return fmt.Sprintf("%d/%d trees placed%s, %d with every child in one NVLink domain and the tree in one leaf; per placed tree, s from the first create to its last pod bound: %s; Warning events on their roots %v later: %s%s",
		r.placed, w.gangs, trap, r.within, strings.Join(per, " "), treeWarningsAfter, r.warnings, why)
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

// treeWhy is what the scheduler wrote on the leaf PodGroups of namespace
// ns that are not scheduled: their PodGroupInitiallyScheduled conditions'
// distinct reasons and messages (each cut at 300 bytes), with how many
// leaves gave each; "" when every leaf is scheduled.
func treeWhy(ctx context.Context, c kubernetes.Interface, ns string) string {
	list, err := c.SchedulingV1beta1().PodGroups(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Sprintf("list podgroups: %v", err)
	}
	seen := map[string]int{}
	var order []string
	for _, pg := range list.Items {
		cond := meta.FindStatusCondition(pg.Status.Conditions, schedulingv1beta1.PodGroupInitiallyScheduled)
		msg := "no condition"
		if cond != nil {
			if cond.Status == metav1.ConditionTrue {
				continue
			}
			msg = cond.Reason + ": " + cond.Message
		}
		if len(msg) > 300 {
			msg = msg[:300] + "…"
		}
		if seen[msg] == 0 {
			order = append(order, msg)
		}
		seen[msg]++
	}
	var out []string
	for _, m := range order {
		out = append(out, fmt.Sprintf("%d× %q", seen[m], m))
	}
	return strings.Join(out, "; ")
}

// treeWarningsAfter is how long treeWarnings lets a scheduler go on after
// the trees are bound before it counts.
const treeWarningsAfter = 5 * time.Second

// treeWarnings counts the Warning events (with their counts) on the root
// CompositePodGroups of placed trees in namespace ns, treeWarningsAfter
// after the run (untimed), by reason and first message: a placed tree
// should have none.
func treeWarnings(ctx context.Context, c kubernetes.Interface, ns string, w peerWorkload, pw *podWatch) string {
	placed := map[string]bool{}
	for g := range w.gangs {
		placed[peerGroupName(g)] = treePlaced(pw, w, g)
	}
	time.Sleep(treeWarningsAfter)
	list, err := c.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.kind=CompositePodGroup,type=Warning"})
	if err != nil {
		return fmt.Sprintf("list events: %v", err)
	}
	count, first := map[string]int32{}, map[string]string{}
	var reasons []string
	for _, e := range list.Items {
		if !placed[e.InvolvedObject.Name] {
			continue
		}
		if _, ok := count[e.Reason]; !ok {
			reasons = append(reasons, e.Reason)
			first[e.Reason] = e.Message
		}
		count[e.Reason] += max(1, e.Count)
	}
	var out []string
	for _, r := range reasons {
		msg := first[r]
		if len(msg) > 120 {
			msg = msg[:120] + "…"
		}
		out = append(out, fmt.Sprintf("%d× %s (%q)", count[r], r, msg))
	}
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, "; ")
}

// treePlaced reports whether every pod of tree g is bound.
func treePlaced(pw *podWatch, w peerWorkload, g int) bool {
	name := peerGroupName(g)
	for k, i := range w.tree.order(g) {
		for j := range w.tree.children[i].pods {
			if node, _ := pw.boundTo(treePodName(treeChildName(name, k), j)); node == "" {
				return false
			}
		}
	}
	return true
}
