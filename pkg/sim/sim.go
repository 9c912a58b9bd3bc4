package sim

import (
	"container/heap"
	"context"
	"fmt"
	"time"

	"github.com/gpufabric/gpufabric/pkg/sim/fabric"
	"github.com/gpufabric/gpufabric/pkg/sim/trees"
)

// Options of one run.
type Options struct {
	// Horizon ends the run, in seconds of simulated time; 0 means the last
	// arrival of the trace. Gangs still waiting then count with the time
	// they waited so far.
	Horizon int64
	// Timeout tears down a partially placed gang of a pod-by-pod policy
	// this long after the attempt that first left it partial; its pods are
	// deleted and it goes to the back of the queue. Default 600 s.
	Timeout int64
	// Failures, when set, injects failures and accounts goodput
	// (goodput.go); Result.Goodput then holds the numbers.
	Failures *Failures
}

// DefaultTimeout is the default teardown timeout of partial gangs.
const DefaultTimeout = 600

type eventKind int

// At equal times: departures, then timeouts, then arrivals, then (failure
// runs) repairs, failures and replacement bounds; then one pass over the
// queue.
const (
	evDeparture eventKind = iota
	evTimeout
	evArrival
	evRepair
	evFailure
	evReplaceTimeout
)

// event is one event; gang is a node for evRepair and an index into the
// failure schedule for evFailure. gen is the gang's generation the event
// was made for (failure runs: a restarted gang ignores older ones).
type event struct {
	t    int64
	kind eventKind
	gang int
	gen  int
}

type eventHeap []event

func (h eventHeap) Len() int { return len(h) }
func (h eventHeap) Less(i, j int) bool {
	a, b := h[i], h[j]
	if a.t != b.t {
		return a.t < b.t
	}
	if a.kind != b.kind {
		return a.kind < b.kind
	}
	return a.gang < b.gang
}
func (h eventHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *eventHeap) Push(x any)   { *h = append(*h, x.(event)) }
func (h *eventHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}

// gangRun is a gang's state in one run.
type gangRun struct {
	g     TraceGang
	nodes []int // per pod, -1 while unplaced
	gpus  []int // per pod
	// devs per pod: its GPUs' positions on its node (runs with trees).
	devs      [][]int
	placed    int
	start     int64 // -1 until all pods are placed
	timeoutAt int64 // -1 when no teardown is armed
	fx        *gangFail
}

type runner struct {
	ctx     context.Context
	p       Policy
	c       *Cluster
	opt     Options
	events  eventHeap
	gangs   map[int]*gangRun
	queue   []int // waiting gang ids, FIFO
	now     int64
	busy    int // GPUs of running gangs
	held    int // GPUs of pods of partial gangs
	lastT   int64
	busyInt float64 // GPU-seconds of running gangs
	res     *Result
	fx      *failureRun // failure runs only
	ids     []int       // gang ids in trace order
	devs    *trees.Devices
}

// Run replays a trace with one policy on an empty cluster of fabric f.
//
// The queue is FIFO with backfill and no reservation: after the events of
// one instant, every waiting gang is tried in arrival order and any gang
// that can be placed is, even if an earlier one cannot.
func Run(ctx context.Context, f *fabric.Fabric, tr *Trace, p Policy, opt Options) (*Result, error) {
	if opt.Timeout <= 0 {
		opt.Timeout = DefaultTimeout
	}
	if opt.Horizon <= 0 && len(tr.Gangs) > 0 {
		opt.Horizon = tr.Gangs[len(tr.Gangs)-1].Arrival
	}
	r := &runner{ctx: ctx, p: p, c: NewCluster(f), opt: opt, gangs: map[int]*gangRun{},
		res: &Result{Policy: p.Name(), Gangs: len(tr.Gangs), TotalGPUs: f.TotalGPUs, Horizon: opt.Horizon}}
	for _, g := range tr.Gangs {
		if _, dup := r.gangs[g.ID]; dup {
			return nil, fmt.Errorf("gang id %d repeated", g.ID)
		}
		gpus := g.PodGPUs()
		nodes := make([]int, len(gpus))
		for i := range nodes {
			nodes[i] = -1
		}
		r.gangs[g.ID] = &gangRun{g: g, nodes: nodes, gpus: gpus, start: -1, timeoutAt: -1}
		r.ids = append(r.ids, g.ID)
		heap.Push(&r.events, event{t: g.Arrival, kind: evArrival, gang: g.ID})
	}
	if err := r.initTrees(tr); err != nil {
		return nil, err
	}
	if err := r.initFailures(); err != nil {
		return nil, err
	}
	for r.events.Len() > 0 && r.events[0].t <= opt.Horizon {
		r.advance(r.events[0].t)
		for r.events.Len() > 0 && r.events[0].t == r.now {
			if err := r.handle(heap.Pop(&r.events).(event)); err != nil {
				return nil, err
			}
		}
		if err := r.pass(); err != nil {
			return nil, err
		}
		r.res.sample(r.now, r.busy, r.held)
	}
	r.advance(opt.Horizon)
	r.finish()
	return r.res, nil
}

func (r *runner) advance(t int64) {
	r.busyInt += float64(r.busy) * float64(t-r.lastT)
	r.now, r.lastT = t, t
}

func (r *runner) handle(ev event) error {
	gr := r.gangs[ev.gang]
	switch ev.kind {
	case evArrival:
		r.queue = append(r.queue, ev.gang)
	case evDeparture:
		if r.fx != nil && !r.completed(gr, ev) {
			return nil
		}
		r.busy -= gr.g.GPUs()
		return r.release(gr)
	case evTimeout:
		if gr.start >= 0 || gr.timeoutAt != r.now || gr.placed == 0 {
			return nil
		}
		r.held -= gr.heldGPUs()
		r.res.Teardowns++
		for i, id := range r.queue {
			if id == ev.gang {
				r.queue = append(append(r.queue[:i:i], r.queue[i+1:]...), ev.gang)
				break
			}
		}
		return r.release(gr)
	case evRepair, evFailure, evReplaceTimeout:
		return r.handleFailure(ev)
	}
	return nil
}

// release frees a gang's nodes and tells the policy.
func (r *runner) release(gr *gangRun) error {
	for i, n := range gr.nodes {
		if n >= 0 {
			r.c.give(n, gr.gpus[i])
			r.giveDevices(gr, i)
			gr.nodes[i] = -1
		}
	}
	gr.placed, gr.timeoutAt = 0, -1
	return r.p.Release(r.ctx, gr.g.ID)
}

// pass tries every waiting gang once, in FIFO order.
func (r *runner) pass() error {
	// refused[s] is the fewest unplaced pods of s GPUs refused in this
	// pass: the cluster only fills up during a pass, so a gang with as
	// many pods of that size is refused without asking the policy. Not
	// with reservations: gangs of one size see different nodes.
	refused := map[int]int{}
	if tk, ok := r.p.(Ticker); ok {
		waiting := make([]TraceGang, 0, len(r.queue))
		for _, id := range r.queue {
			waiting = append(waiting, r.gangs[id].g)
		}
		if err := tk.Tick(r.ctx, r.now, waiting); err != nil {
			return err
		}
		refused = nil
	}
	if r.fx != nil {
		// Before the queue: a replacement may take a spare. The spares
		// stay the same during the pass (the highest wholly free nodes
		// of each domain, which no new gang takes), so the refusal
		// shortcut holds.
		if err := r.replacements(); err != nil {
			return err
		}
	}
	next := r.queue[:0]
	for _, id := range r.queue {
		started, err := r.try(r.gangs[id], refused)
		if err != nil {
			return err
		}
		if !started {
			next = append(next, id)
		}
	}
	r.queue = next
	return nil
}

// try asks the policy to place one waiting gang and applies the result.
// The refusal shortcut (refused, by pod size) holds for flat gangs only.
func (r *runner) try(gr *gangRun, refused map[int]int) (bool, error) {
	s, tree := gr.g.GPUsPerPod, gr.g.Tree != nil
	left := len(gr.nodes) - gr.placed
	need, free := gr.g.GPUs()-gr.heldGPUs(), r.c.FreeTotal
	if !r.p.PodByPod() && need > free {
		return false, nil // not an attempt: no all-or-nothing policy could place it
	}
	if m, ok := refused[s]; ok && refused != nil && !tree && left >= m {
		r.res.refusal(r.now, gr.g.ID, need, free)
		return false, nil
	}
	out, err := r.decide(gr)
	if err != nil {
		return false, err
	}
	complete := out != nil
	for _, n := range out {
		complete = complete && n >= 0
	}
	room := complete && !tree && r.c.nvlinkRoom(gr.g, gr.nodes)
	before := gr.heldGPUs()
	for i, n := range out {
		if gr.nodes[i] < 0 && n >= 0 {
			if err := r.c.take(n, gr.gpus[i]); err != nil {
				return false, fmt.Errorf("%s: gang %d: %w", r.p.Name(), gr.g.ID, err)
			}
			if err := r.takeDevices(gr, i, n); err != nil {
				return false, fmt.Errorf("%s: gang %d: %w", r.p.Name(), gr.g.ID, err)
			}
			gr.nodes[i] = n
			gr.placed++
		}
	}
	if complete {
		r.held -= before
		r.start(gr, room)
		return true, nil
	}
	r.held += gr.heldGPUs() - before
	r.treeRefused(gr)
	if gr.placed > 0 && gr.timeoutAt < 0 {
		gr.timeoutAt = r.now + r.opt.Timeout
		heap.Push(&r.events, event{t: gr.timeoutAt, kind: evTimeout, gang: gr.g.ID})
	}
	u := len(gr.nodes) - gr.placed
	if r.p.PodByPod() {
		u = 1 // first fit left a pod out: no node has s GPUs free
	}
	if m, ok := refused[s]; refused != nil && !tree && (!ok || u < m) {
		refused[s] = u
	}
	r.res.refusal(r.now, gr.g.ID, need, free)
	return false, nil
}

// decide syncs the policy (timed apart) and times its Place call.
func (r *runner) decide(gr *gangRun) ([]int, error) {
	if sy, ok := r.p.(Syncer); ok {
		t0 := time.Now()
		rebuilt, err := sy.Sync(r.ctx)
		if err != nil {
			return nil, err
		}
		if rebuilt {
			r.res.Syncs++
			r.res.SyncTime += time.Since(t0)
		}
	}
	if h, ok := r.p.(hider); ok && r.fx != nil {
		h.hide(r.c.hidden(r.fx.down, r.fx.rec.Spares))
	}
	t0 := time.Now()
	out, err := r.p.Place(r.ctx, r.c, gr.g, gr.nodes)
	took := time.Since(t0)
	r.res.Latencies = append(r.res.Latencies, took)
	if gr.g.Tree != nil {
		r.res.TreeLatencies = append(r.res.TreeLatencies, took)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: gang %d: %w", r.p.Name(), gr.g.ID, err)
	}
	if out != nil && len(out) != len(gr.nodes) {
		return nil, fmt.Errorf("%s: gang %d: %d nodes for %d pods", r.p.Name(), gr.g.ID, len(out), len(gr.nodes))
	}
	return out, nil
}

// start records a gang whose pods are all placed and schedules its end.
func (r *runner) start(gr *gangRun, room bool) {
	gr.start, gr.timeoutAt = r.now, -1
	r.busy += gr.g.GPUs()
	end, gen, again := r.now+gr.g.Duration, 0, false
	if r.fx != nil {
		end, gen, again = r.started(gr)
	}
	heap.Push(&r.events, event{t: end, kind: evDeparture, gang: gr.g.ID, gen: gen})
	if again {
		return // a restart: the placement metrics counted its first start
	}
	oneDomain := true
	for _, n := range gr.nodes {
		oneDomain = oneDomain && r.c.Fabric.DomainOf[0][n] == r.c.Fabric.DomainOf[0][gr.nodes[0]]
	}
	r.res.placed(gr.g, r.now-gr.g.Arrival, oneDomain, room, gr.g.GPUs() <= r.c.Fabric.MaxNVLinkGPUs)
	r.treeStarted(gr)
	r.res.ranks(gr.nodes, r.c.Fabric.RackOf)
	r.res.spread(gr.g, gr.nodes, r.c.Fabric.RackOf, func(n int) int { return r.c.Fabric.DomainOf[0][n] }, r.c.Fabric.MaxNVLinkGPUs)
}

func (r *runner) finish() {
	for _, id := range r.queue {
		if gr := r.gangs[id]; gr.g.Arrival <= r.opt.Horizon {
			r.res.Waits = append(r.res.Waits, r.opt.Horizon-gr.g.Arrival)
			r.res.sizeWait(gr.g.GPUs(), r.opt.Horizon-gr.g.Arrival, false)
			if gr.g.Tree != nil {
				r.res.Trees.Waiting(gr.g.Tree, r.opt.Horizon-gr.g.Arrival)
			}
		}
	}
	r.res.BusyPct = 100 * r.busyInt / (float64(r.c.Fabric.TotalGPUs) * float64(max(1, r.opt.Horizon)))
	if r.fx != nil {
		r.finishFailures()
	}
}
