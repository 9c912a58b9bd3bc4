package soak

import (
	"context"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/gpufabric/gpufabric/pkg/gang/report"
)

// report prints the run's numbers (docs/benchmarks.md): the counters, and
// the normal gangs' time from creation to all bound in the clean half and
// in the half where the adversarial tenant was sending, with their ratio.
func (s *soak) report(adv *adversary) {
	s.mu.Lock()
	faults := fmt.Sprint(s.faults)
	total := 0
	for _, n := range s.faults {
		total += n
	}
	var clean, attacked []time.Duration
	for _, g := range s.gangs {
		if g.impossible || g.done.IsZero() {
			continue
		}
		if g.adversary {
			attacked = append(attacked, g.done.Sub(g.created))
		} else {
			clean = append(clean, g.done.Sub(g.created))
		}
	}
	s.mu.Unlock()
	line := fmt.Sprintf("soak: gangs created=%d placed=%d deleted=%d kills=%d processes=%d faults=%d %s violations=%d",
		s.created.Load(), s.placed.Load(), s.deleted.Load(), s.kills.Load(), s.gen, total, faults, s.violations.Load())
	s.emit(line)
	if adv == nil {
		return
	}
	s.emit(fmt.Sprintf("soak: time to all bound, clean half: %s; with the adversary: %s; p50 ratio %s; adversary writes=%d",
		quantiles(clean), quantiles(attacked), ratio(clean, attacked), adv.writes))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pods, bound := adversaryPods(ctx, s.admin)
	s.emit(fmt.Sprintf("soak: adversary pods=%d bound with GPUs=%d (none can fit)", pods, bound))
	if bound > 0 {
		s.violation("%d of the adversary's never-fitting GPU pods are bound", bound)
	}
	n, where := longestMessage(ctx, s.admin)
	s.emit(fmt.Sprintf("soak: longest message written on the adversary's objects: %d bytes (%s; its annotation: %d KiB)", n, where, hugeValue>>10))
	if n > report.MaxMessage {
		s.violation("a %d-byte message on the adversary's %s: messages are bounded at %d", n, where, report.MaxMessage)
	}
}

func (s *soak) emit(line string) {
	s.t.Log(line)
	fmt.Fprintln(os.Stderr, line)
}

// quantiles is "n=N p50=… p90=… max=…" of ds.
func quantiles(ds []time.Duration) string {
	if len(ds) == 0 {
		return "n=0"
	}
	ds = slices.Clone(ds)
	slices.Sort(ds)
	q := func(p float64) time.Duration { return ds[int(p*float64(len(ds)-1))].Round(10 * time.Millisecond) }
	return fmt.Sprintf("n=%d p50=%s p90=%s max=%s", len(ds), q(0.5), q(0.9), ds[len(ds)-1].Round(10*time.Millisecond))
}

// ratio is the attacked half's p50 over the clean half's.
func ratio(clean, attacked []time.Duration) string {
	if len(clean) == 0 || len(attacked) == 0 {
		return "n/a"
	}
	c, a := slices.Clone(clean), slices.Clone(attacked)
	slices.Sort(c)
	slices.Sort(a)
	pc, pa := c[len(c)/2], a[len(a)/2]
	if pc <= 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.2f", float64(pa)/float64(pc))
}
