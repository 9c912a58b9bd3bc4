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
// Normal tenant: 100 gangs of 3 one-GPU pods and 20 of 2 eight-GPU pods.
// Adversary (older, so ranked first): 10 one-pod gangs whose claim has 32
// valid but slow CEL selectors (each call runs out of the allocator's
// 100 ms), 50 gangs with 200 KiB annotations on their PodGroup's pods that
// fit nowhere, and 2,000 one-pod gangs of 16 GPUs (no node has 16).
// wake: how often the cluster wakes every parked gang (FlushParked:
// slices, nodes or classes changing); 0: never, as placing the normal
// gangs alone does not.
func BenchmarkAdversarialTenant(b *testing.B) {
	for _, v := range []struct {
		name        string
		adversary   bool
		wake        time.Duration
		commitDelay time.Duration
	}{
		{"clean", false, 0, commitLatency},
		{"adversary", true, 0, commitLatency},
		{"adversary/wake-1s", true, time.Second, commitLatency},
		{"clean/worker-only", false, 0, 0},
		{"adversary/worker-only", true, 0, 0},
	} {
		b.Run(v.name, func(b *testing.B) {
			for b.Loop() {
				h := newCostHarness(b, v.adversary, v.wake, v.commitDelay)
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
// gangs' memories, the commits in flight.
type costHarness struct {
	cfg       placement.Config
	snap      *index.Snapshot
	q         *queue.Queue
	clk       *testingclock.FakeClock
	start     time.Time
	mem       *cost.Memories
	gangs     map[string]benchGang
	since     map[string]time.Time
	inflight  []time.Time // commit ends, sorted
	normal    int         // normal gangs not yet handed to a commit
	bound     time.Duration
	wake      time.Duration
	nextWake  time.Time
	commit    time.Duration
	refusedOK int // normal gangs refused (should stay 0)

	workerTime map[string]time.Duration
	attempts   map[string]int
	calls      map[string]int
}

func newCostHarness(b *testing.B, adversary bool, wake, commit time.Duration) *costHarness {
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
	h := &costHarness{cfg: built.Config, snap: snap, clk: clk, start: clk.Now(), mem: cost.NewMemories(0), gangs: map[string]benchGang{}, since: map[string]time.Time{},
		wake: wake, nextWake: clk.Now().Add(wake), commit: commit,
		workerTime: map[string]time.Duration{}, attempts: map[string]int{}, calls: map[string]int{}}
	h.q = queue.New(queue.Config{InitialBackoff: time.Second, MaxBackoff: 10 * time.Second, MaxUnschedulableWait: time.Minute, Clock: clk})
	h.q.SetRank(func(key string) queue.Rank { return queue.Rank{Since: h.since[key]} })
	if adversary {
		older := h.start.Add(-time.Second)
		for i := range 10 {
			h.add(b, kindSlow, scenario.GangSpec{Name: fmt.Sprintf("slow-%d", i), Pods: 1, GPUsPerPod: 1}, older, slowClaims)
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

// hugeAnnotations puts 200 KiB of annotations on each member.
func hugeAnnotations(g *placement.Gang) {
	v := strings.Repeat("x", 200<<10)
	for _, m := range g.Members {
		m.Pod.Annotations = map[string]string{"example.com/blob": v}
	}
}

// run places until every normal gang's commit ended.
func (h *costHarness) run(b *testing.B) {
	for h.normal > 0 {
		key, ok := h.next(b)
		if !ok {
			break
		}
		h.attempt(b, key)
		h.q.Done(key)
	}
	for len(h.inflight) > 0 {
		h.advanceTo(h.inflight[len(h.inflight)-1])
	}
	if h.refusedOK > 0 {
		b.Errorf("%d attempts of normal gangs refused", h.refusedOK)
	}
}

// next returns the next gang the worker gets: at once when one is ready;
// otherwise the fake clock moves on (commits end, backoffs end) until one
// is.
func (h *costHarness) next(b *testing.B) (string, bool) {
	for range 100_000 {
		if h.q.Counts()["active"] > 0 {
			k, quit := h.q.Get()
			return k, !quit
		}
		switch {
		case len(h.inflight) > 0:
			h.advanceTo(h.inflight[0])
		default:
			h.advanceTo(h.clk.Now().Add(100 * time.Millisecond))
		}
	}
	b.Fatal("no gang ready for 10,000 s")
	return "", false
}

// advanceTo steps the fake clock to t, ending the commits due and waking
// the parked gangs every h.wake.
func (h *costHarness) advanceTo(t time.Time) {
	for h.wake > 0 && !h.nextWake.After(t) {
		h.stepTo(h.nextWake)
		h.q.FlushParked()
		h.nextWake = h.nextWake.Add(h.wake)
	}
	h.stepTo(t)
}

func (h *costHarness) stepTo(t time.Time) {
	if d := t.Sub(h.clk.Now()); d > 0 {
		h.clk.Step(d)
	}
	for len(h.inflight) > 0 && !h.inflight[0].After(h.clk.Now()) {
		h.inflight = h.inflight[1:]
	}
}

// attempt places one gang as the worker does (cycle.go: the attempt's
// budget and memory; refuse's parking rules) and lets the fake clock pass
// the time it took.
func (h *costHarness) attempt(b *testing.B, key string) {
	ctx := context.Background()
	bg := h.gangs[key]
	cycle := h.q.Cycle()
	t0 := time.Now()
	cfg := h.cfg
	cfg.Budget.Deadline = cost.DeadlineFor(t0, cost.DefaultTime, len(bg.g.Members))
	bg.g.Memory = h.mem.For(key)
	d, u, err := placement.Place(ctx, cfg, h.snap, bg.g)
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
	h.advanceTo(h.clk.Now().Add(took))
	switch {
	case d != nil:
		h.q.Forget(key)
		h.mem.Forget(key)
		h.hand(bg)
	case u.TimedOut != nil:
		h.q.ParkTimedOut(key, cycle)
	case devicesShort(bg.g, u) > 0:
		h.q.ParkDevicesShort(key, cycle, devicesShort(bg.g, u))
	default:
		h.q.Park(key, cycle)
	}
	if d == nil && bg.kind == kindNormal {
		h.refusedOK++
	}
}

// hand hands a placed gang to the commit pipeline, waiting for a free slot
// as commit.Pipeline does.
func (h *costHarness) hand(bg benchGang) {
	if bg.kind != kindNormal {
		return
	}
	for len(h.inflight) >= commitsInFlight {
		h.advanceTo(h.inflight[0])
	}
	end := h.clk.Now().Add(h.commit)
	h.inflight = append(h.inflight, end)
	slices.SortFunc(h.inflight, func(a, b time.Time) int { return a.Compare(b) })
	h.normal--
	h.bound = max(h.bound, end.Sub(h.start))
}
