package scheduler

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/gpufabric/gpufabric/pkg/gang/placement"
	"github.com/gpufabric/gpufabric/pkg/gang/placement/cost"
	"github.com/gpufabric/gpufabric/pkg/gang/placement/index"
	"github.com/gpufabric/gpufabric/pkg/gang/placement/scenario"
	"github.com/gpufabric/gpufabric/pkg/gang/queue"
)

// BenchmarkAdversarialTenant: how long a normal tenant's gangs take to be
// placed and committed on 1,000 HGX nodes (8,000 GPUs, about half busy)
// with and without an adversarial tenant's gangs queued before them, each
// variant from an empty queue. It drives the real engine (placement.Place,
// its budget and memory, the real structured allocator and CEL) and the
// real queue (backoffs, parking) on a fake clock that advances by the
// measured time of each attempt; the worker applies the loop's rules for
// a refused gang (refuse in cycle.go); commits are modelled by the
// pipeline's measured rate on the real control plane: commitLatency each,
// commitsInFlight at once (docs/benchmarks.md, BenchmarkSmallGangs).
// Informers, status writes and events are not in it.
//
// Normal tenant (namespace default): 100 gangs of 3 one-GPU pods and 20
// of 2 eight-GPU pods. Adversary (namespace adversary, all older, so ranked
// first at the same priority): 10 one-pod gangs whose claim has 32 valid
// but slow CEL selectors (each call runs out of the allocator's 100 ms),
// 50 gangs of 2 × 16 GPUs (they fit nowhere) with 200 KiB annotations on
// their pods, and 2,000 one-pod gangs of 16 GPUs (no node has 16). The
// variants (costVariant) turn the namespaces' fair share on and off, wake
// the parked gangs periodically, and model parallel placement.
func BenchmarkAdversarialTenant(b *testing.B) {
	for _, v := range []costVariant{
		{name: "clean", commit: commitLatency, workers: 1, fair: true},
		{name: "adversary/budget-only", adversary: true, commit: commitLatency, workers: 1},
		{name: "adversary/budget-only/wake-1s", adversary: true, wake: time.Second, commit: commitLatency, workers: 1},
		{name: "adversary/budget-only/2-workers", adversary: true, commit: commitLatency, workers: 2},
		{name: "adversary/budget-only/wake-1s/2-workers", adversary: true, wake: time.Second, commit: commitLatency, workers: 2},
		{name: "adversary/budget-only/wake-1s/4-workers", adversary: true, wake: time.Second, commit: commitLatency, workers: 4},
		{name: "adversary/fair", adversary: true, commit: commitLatency, workers: 1, fair: true},
		{name: "adversary/fair/wake-1s", adversary: true, wake: time.Second, commit: commitLatency, workers: 1, fair: true},
		{name: "clean/worker-only", workers: 1, fair: true},
		{name: "adversary/fair/worker-only", adversary: true, workers: 1, fair: true},
		{name: "adversary/fair/wake-1s/worker-only", adversary: true, wake: time.Second, workers: 1, fair: true},
	} {
		b.Run(v.name, func(b *testing.B) {
			for b.Loop() {
				h := newCostHarness(b, v)
				h.run(b)
				b.ReportMetric(h.bound.Seconds(), "s-to-all-bound")
				b.ReportMetric(h.workerTime[kindNormal].Seconds(), "s-worker-normal")
				b.ReportMetric(h.workerTime[kindSlow].Seconds(), "s-worker-slow")
				b.ReportMetric(h.workerTime[kindNever].Seconds(), "s-worker-never-fitting")
				b.ReportMetric(h.workerTime[kindHuge].Seconds(), "s-worker-annotations")
				b.ReportMetric(float64(h.attempts[kindSlow]+h.attempts[kindNever]+h.attempts[kindHuge]), "adversary-attempts")
				b.ReportMetric(float64(h.calls[kindSlow]), "slow-allocate-calls")
			}
		})
	}
}

// costVariant is one run's setting: with the adversary; wake: how often
// the cluster wakes every parked gang (0: never); commit: the modelled
// commit latency (0: the worker alone); workers: attempts at once (more
// than 1 models parallel placement optimistically: each attempt as fast
// as alone, no conflicts); fair: the worker charges each attempt to its
// namespace (Queue.Charge), as the scheduler does.
type costVariant struct {
	name      string
	adversary bool
	wake      time.Duration
	commit    time.Duration
	workers   int
	fair      bool
}

// commitLatency and commitsInFlight model the commit pipeline:
// BenchmarkSmallGangs measured 233 ms per commit with 8 in flight (32.4
// gangs/s) on the real control plane.
const (
	commitLatency   = 233 * time.Millisecond
	commitsInFlight = 8
)

const (
	kindNormal = "normal"
	kindSlow   = "slow-selectors"
	kindNever  = "never-fitting"
	kindHuge   = "huge-annotations"
)

type benchGang struct {
	g    *placement.Gang
	kind string
}

// costHarness is one run: a snapshot, the queue on a fake clock, the
// gangs' memories, the attempts and commits in flight.
type costHarness struct {
	v        costVariant
	cfg      placement.Config
	snap     *index.Snapshot
	q        *queue.Queue
	clk      *testingclock.FakeClock
	start    time.Time
	mem      *cost.Memories
	gangs    map[string]benchGang
	since    map[string]time.Time
	ends     []attemptEnd // attempts in flight, by end
	commits  []time.Time  // commit ends, sorted
	normal   int          // normal gangs not yet handed to a commit
	bound    time.Duration
	nextWake time.Time
	refused  int // attempts of normal gangs refused (should stay 0)

	workerTime map[string]time.Duration
	attempts   map[string]int
	calls      map[string]int
}

// attemptEnd is an attempt's outcome, applied when it ends.
type attemptEnd struct {
	at    time.Time
	key   string
	cycle uint64
	d     *placement.Decision
	u     *placement.Unschedulable
}

func newCostHarness(b *testing.B, v costVariant) *costHarness {
	ctx := context.Background()
	built, err := scenario.Build(scenario.HGXScenario(1000, 1))
	if err != nil {
		b.Fatal(err)
	}
	built.Config.Index.MatchCache = index.NewMatchCache()
	snap, err := index.NewSnapshot(ctx, built.Config.Index, built.Input)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := snap.Warm(ctx, []string{"gpu.gpufabric.dev"}); err != nil {
		b.Fatal(err)
	}
	clk := testingclock.NewFakeClock(time.Unix(1_000_000, 0))
	h := &costHarness{v: v, cfg: built.Config, snap: snap, clk: clk, start: clk.Now(), mem: cost.NewMemories(0), gangs: map[string]benchGang{}, since: map[string]time.Time{},
		nextWake: clk.Now().Add(v.wake), workerTime: map[string]time.Duration{}, attempts: map[string]int{}, calls: map[string]int{}}
	h.q = queue.New(queue.Config{InitialBackoff: time.Second, MaxBackoff: 10 * time.Second, MaxUnschedulableWait: time.Minute, Clock: clk})
	h.q.SetRank(func(key string) queue.Rank { return queue.Rank{Since: h.since[key]} })
	if v.adversary {
		// Older than the normal gangs, the dearest first: the worst order
		// for the others.
		older := h.start.Add(-time.Second)
		for i := range 10 {
			h.add(b, kindSlow, scenario.GangSpec{Name: fmt.Sprintf("slow-%d", i), Pods: 1, GPUsPerPod: 1}, older.Add(-time.Second), slowClaims)
		}
		for i := range 50 {
			h.add(b, kindHuge, scenario.GangSpec{Name: fmt.Sprintf("huge-%d", i), Pods: 2, GPUsPerPod: 16}, older, hugeAnnotations)
		}
		for i := range 2000 {
			h.add(b, kindNever, scenario.GangSpec{Name: fmt.Sprintf("never-%04d", i), Pods: 1, GPUsPerPod: 16}, older, nil)
		}
	}
	for i := range 100 {
		h.add(b, kindNormal, scenario.GangSpec{Name: fmt.Sprintf("small-%03d", i), Pods: 3, GPUsPerPod: 1}, h.start.Add(time.Duration(i)), nil)
	}
	for i := range 20 {
		h.add(b, kindNormal, scenario.GangSpec{Name: fmt.Sprintf("wide-%02d", i), Pods: 2, GPUsPerPod: 8}, h.start.Add(time.Duration(100+i)), nil)
	}
	return h
}

func (h *costHarness) add(b *testing.B, kind string, gs scenario.GangSpec, since time.Time, edit func(*placement.Gang)) {
	g, _, err := scenario.BuildGang(gs)
	if err != nil {
		b.Fatal(err)
	}
	if kind != kindNormal {
		g.Namespace = "adversary"
	}
	if edit != nil {
		edit(g)
	}
	key := queue.PodGroupKey(g.Namespace, g.Name)
	h.gangs[key] = benchGang{g: g, kind: kind}
	h.since[key] = since
	if kind == kindNormal {
		h.normal++
	}
	h.q.Add(key)
}

// slowClaims gives the gang's claim 32 slow but valid selectors (each
// evaluation of one costs 30³ string operations; its estimated cost is
// under resourceapi.CELSelectorExpressionMaxCost).
func slowClaims(g *placement.Gang) {
	l := "[" + strings.TrimSuffix(strings.Repeat("1,", 30), ",") + "]"
	expr := l + `.all(i, ` + l + `.all(j, ` + l + `.all(k, device.attributes["gpufabric.dev"].nvlinkDomain.lowerAscii() != "zz")))`
	req := &g.Members[0].Claims[0].Spec.Devices.Requests[0]
	for range 32 {
		req.Exactly.Selectors = append(req.Exactly.Selectors, resourceapi.DeviceSelector{CEL: &resourceapi.CELDeviceSelector{Expression: expr}})
	}
}

// hugeAnnotations puts 200 KiB of annotations on each member. The engine
// reads none of them (only the PodGroup's three gpufabric.dev ones, which
// are validated and short): their cost is the API's and the messages',
// not in this harness.
func hugeAnnotations(g *placement.Gang) {
	v := strings.Repeat("x", 200<<10)
	for _, m := range g.Members {
		m.Pod.Annotations = map[string]string{"example.com/blob": v}
	}
}

// run places until every normal gang's commit ended, with v.workers
// attempts at once.
func (h *costHarness) run(b *testing.B) {
	free := make([]time.Time, h.v.workers)
	for i := range free {
		free[i] = h.start
	}
	for h.normal > 0 {
		w := 0
		for i := range free {
			if free[i].Before(free[w]) {
				w = i
			}
		}
		if free[w].After(h.clk.Now()) {
			h.advanceTo(free[w])
			continue // the attempts that ended may have been the last
		}
		if h.q.Counts()["active"] == 0 {
			h.advanceTo(h.nextEvent(b))
			continue
		}
		key, quit := h.q.Get()
		if quit {
			b.Fatal("queue shut down")
		}
		free[w] = h.attempt(b, key)
	}
	for len(h.ends) > 0 || len(h.commits) > 0 {
		h.advanceTo(h.nextEvent(b))
	}
	if h.refused > 0 {
		b.Errorf("%d attempts of normal gangs refused", h.refused)
	}
}

// nextEvent is when something happens next: an attempt or a commit ends,
// else 100 ms on (backoffs end on the fake clock's timers).
func (h *costHarness) nextEvent(b *testing.B) time.Time {
	next := h.clk.Now().Add(100 * time.Millisecond)
	if len(h.ends) > 0 && h.ends[0].at.Before(next) {
		next = h.ends[0].at
	}
	if len(h.commits) > 0 && h.commits[0].Before(next) {
		next = h.commits[0]
	}
	if next.Sub(h.start) > 3*time.Hour {
		b.Fatal("no normal gang placed in 3 hours")
	}
	return next
}

// advanceTo moves the fake clock to t: attempts and commits end, and the
// cluster wakes the parked gangs every v.wake, each at its time.
func (h *costHarness) advanceTo(t time.Time) {
	for {
		at := t
		if h.v.wake > 0 && h.nextWake.Before(at) {
			at = h.nextWake
		}
		if len(h.ends) > 0 && h.ends[0].at.Before(at) {
			at = h.ends[0].at
		}
		if len(h.commits) > 0 && h.commits[0].Before(at) {
			at = h.commits[0]
		}
		if d := at.Sub(h.clk.Now()); d > 0 {
			h.clk.Step(d)
		}
		switch {
		case len(h.ends) > 0 && !h.ends[0].at.After(at):
			e := h.ends[0]
			h.ends = h.ends[1:]
			h.end(e)
		case len(h.commits) > 0 && !h.commits[0].After(at):
			h.commits = h.commits[1:]
		case h.v.wake > 0 && !h.nextWake.After(at):
			h.q.FlushParked()
			h.nextWake = h.nextWake.Add(h.v.wake)
		}
		if !at.Before(t) && (len(h.ends) == 0 || h.ends[0].at.After(t)) && (len(h.commits) == 0 || h.commits[0].After(t)) &&
			(h.v.wake == 0 || h.nextWake.After(t)) {
			return
		}
	}
}

// attempt places one gang as the worker does (cycle.go: the attempt's
// budget and the gang's memory) and returns when it ends on the fake
// clock: now plus the time it took. Its outcome is applied then (end).
func (h *costHarness) attempt(b *testing.B, key string) time.Time {
	ctx := context.Background()
	bg := h.gangs[key]
	cycle := h.q.Cycle()
	t0 := time.Now()
	cfg := h.cfg
	cfg.Budget.Deadline = cost.DeadlineFor(t0, cost.DefaultTime, len(bg.g.Members))
	bg.g.Memory = h.mem.For(key)
	d, u, err := placement.Place(ctx, cfg, h.snap, bg.g)
	h.mem.Keep(key, bg.g.Memory)
	if err == nil && d != nil {
		err = placement.Assume(ctx, h.snap, bg.g, d)
	}
	took := time.Since(t0)
	if err != nil {
		b.Fatalf("gang %s: %v", key, err)
	}
	h.workerTime[bg.kind] += took
	h.attempts[bg.kind]++
	if d != nil {
		h.calls[bg.kind] += d.Stats.AllocateCalls
	} else {
		h.calls[bg.kind] += u.Stats.AllocateCalls
	}
	if h.v.fair {
		h.q.Charge(key, took)
	}
	e := attemptEnd{at: h.clk.Now().Add(took), key: key, cycle: cycle, d: d, u: u}
	i, _ := slices.BinarySearchFunc(h.ends, e, func(a, b attemptEnd) int { return a.at.Compare(b.at) })
	h.ends = slices.Insert(h.ends, i, e)
	return e.at
}

// end applies an attempt's outcome as the loop does: a placed gang goes to
// the commit pipeline (waiting for a slot); a refused one is parked by
// refuse's rules.
func (h *costHarness) end(e attemptEnd) {
	bg := h.gangs[e.key]
	defer h.q.Done(e.key)
	switch {
	case e.d != nil:
		h.q.Forget(e.key)
		h.mem.Forget(e.key)
		h.hand(bg)
		return
	case e.u.TimedOut != nil:
		h.q.ParkTimedOut(e.key, e.cycle)
	case devicesShort(bg.g, e.u) > 0:
		h.q.ParkDevicesShort(e.key, e.cycle, devicesShort(bg.g, e.u))
	default:
		h.q.Park(e.key, e.cycle)
	}
	if bg.kind == kindNormal {
		h.refused++
	}
}

// hand hands a placed normal gang to the commit pipeline, waiting for a
// free slot as commit.Pipeline does.
func (h *costHarness) hand(bg benchGang) {
	if bg.kind != kindNormal {
		return
	}
	for len(h.commits) >= commitsInFlight {
		h.advanceTo(h.commits[0])
	}
	end := h.clk.Now().Add(h.v.commit)
	i, _ := slices.BinarySearchFunc(h.commits, end, func(a, b time.Time) int { return a.Compare(b) })
	h.commits = slices.Insert(h.commits, i, end)
	h.normal--
	h.bound = max(h.bound, end.Sub(h.start))
}
