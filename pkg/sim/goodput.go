package sim

import (
	"container/heap"
	"fmt"
	"slices"

	"github.com/gpufabric/gpufabric/pkg/sim/failures"
)

// Failures configure a failure run: the model, the schedule of
// interruptions (the same for every policy) and the policy's recovery.
type Failures struct {
	Model    failures.Model
	Schedule []failures.Event
	Recovery Recovery
}

// failureRun is the runner's failure state.
type failureRun struct {
	model  failures.Model
	rec    Recovery
	events []failures.Event
	down   []bool // shared with the Cluster
	g      *Goodput
}

// gangFail is one gang's work and recovery state in a failure run.
type gangFail struct {
	gen      int // bumped whenever the pending departure is void
	starts   int
	prog     failures.Progress
	work     float64 // kept work (seconds) while no segment runs
	running  bool    // a segment is under way
	stalled  bool    // waiting for replacements of lost pods
	waitMark int64
	lostFrom map[int]int // lost pod → the node it was on
	degraded bool        // a member was replaced outside its NVLink domain
	lostLink bool        // ever degraded (counted once)
	failed   bool
	hitAt    int64 // when a hardware failure struck, -1 once recovered
}

func (r *runner) initFailures() error {
	fo := r.opt.Failures
	if fo == nil {
		return nil
	}
	if err := fo.Model.Validate(); err != nil {
		return err
	}
	r.fx = &failureRun{model: fo.Model, rec: fo.Recovery, events: fo.Schedule, down: make([]bool, len(r.c.Free)),
		g: &Goodput{CapacityGPUh: float64(r.c.Fabric.TotalGPUs) * float64(r.opt.Horizon) / 3600}}
	r.c.down = r.fx.down
	r.res.Goodput = r.fx.g
	for i, e := range fo.Schedule {
		if e.Node < 0 || e.Node >= len(r.c.Free) {
			return fmt.Errorf("failure %d on node %d: the fabric has %d nodes", i, e.Node, len(r.c.Free))
		}
		if e.T <= r.opt.Horizon {
			heap.Push(&r.events, event{t: e.T, kind: evFailure, gang: i})
		}
	}
	for _, gr := range r.gangs {
		gr.fx = &gangFail{lostFrom: map[int]int{}, hitAt: -1}
	}
	return nil
}

// started begins a gang's segment after a placement: it returns when the
// gang ends if nothing strikes, the event generation, and whether this is
// a restart (work resumes from the checkpoint after the restart overhead).
func (r *runner) started(gr *gangRun) (int64, int, bool) {
	fx := gr.fx
	again := fx.starts > 0
	fx.starts++
	r.resume(gr, again)
	return fx.prog.EndAt(gr.g.Duration), fx.gen, again
}

// resume starts a segment now, with the restart overhead when restarted.
func (r *runner) resume(gr *gangRun, restarted bool) {
	fx := gr.fx
	fx.gen++
	if fx.hitAt >= 0 {
		r.fx.g.Recoveries = append(r.fx.g.Recoveries, r.now-fx.hitAt)
		fx.hitAt = -1
	}
	p := failures.Progress{Work: fx.work, Start: r.now, Speed: 1}
	if restarted {
		p.Overhead = r.fx.model.RestartOverhead
	}
	if fx.degraded {
		p.Speed = r.fx.model.DegradedSpeed
	}
	fx.prog, fx.running = p, true
}

// completed reports whether a departure is current and, if so, ends the
// gang's last segment.
func (r *runner) completed(gr *gangRun, ev event) bool {
	fx := gr.fx
	if ev.gen != fx.gen || !fx.running {
		return false
	}
	done, cost := fx.prog.Stop(r.now)
	r.fx.g.add(cost, gr.g.GPUs())
	fx.work, fx.running = min(done, float64(gr.g.Duration)), false
	r.fx.g.Completed++
	return true
}

// interrupt ends the running segment with a failure: work since the last
// checkpoint is lost.
func (r *runner) interrupt(gr *gangRun) {
	fx := gr.fx
	kept, cost := fx.prog.Interrupt(r.now, r.fx.model.CheckpointInterval)
	r.fx.g.add(cost, gr.g.GPUs())
	fx.work, fx.running = kept, false
	fx.gen++
	r.fx.g.Interruptions++
}

func (r *runner) handleFailure(ev event) error {
	switch ev.kind {
	case evRepair:
		n := ev.gang
		r.fx.down[n] = false
		free := max(0, r.c.Fabric.GPUs[n]-r.c.Fabric.Busy[n])
		r.c.Free[n], r.c.FreeTotal = free, r.c.FreeTotal+free
	case evFailure:
		e := r.fx.events[ev.gang]
		if r.fx.down[e.Node] {
			return nil
		}
		if e.Hardware {
			return r.nodeDown(e.Node)
		}
		for _, id := range r.ids {
			if gr := r.gangs[id]; gr.fx.running && slices.Contains(gr.nodes, e.Node) {
				r.interrupt(gr) // software: the job restarts in place
				r.fx.g.InPlaceRestarts++
				r.resume(gr, true)
				heap.Push(&r.events, event{t: gr.fx.prog.EndAt(gr.g.Duration), kind: evDeparture, gang: id, gen: gr.fx.gen})
			}
		}
	case evReplaceTimeout:
		gr := r.gangs[ev.gang]
		if ev.gen != gr.fx.gen || !gr.fx.stalled {
			return nil
		}
		return r.noReplacement(gr)
	}
	return nil
}

// nodeDown takes a node out for the repair time; the gangs on it lose
// their pods there.
func (r *runner) nodeDown(n int) error {
	r.fx.down[n] = true
	r.c.FreeTotal -= r.c.Free[n]
	r.c.Free[n] = 0
	r.fx.g.NodeFailures++
	heap.Push(&r.events, event{t: r.now + r.fx.model.RepairTime, kind: evRepair, gang: n})
	for _, id := range r.ids {
		if gr := r.gangs[id]; gr.placed > 0 && slices.Contains(gr.nodes, n) {
			if err := r.lose(gr, n); err != nil {
				return err
			}
		}
	}
	return nil
}

// lose drops a gang's pods on a failed node and starts its recovery.
func (r *runner) lose(gr *gangRun, n int) error {
	s, fx := gr.g.GPUsPerPod, gr.fx
	if gr.start < 0 { // a partial gang of a pod-by-pod policy: the pods go
		for i, m := range gr.nodes {
			if m == n {
				gr.nodes[i], gr.placed, r.held = -1, gr.placed-1, r.held-s
			}
		}
		return nil
	}
	if fx.running {
		r.interrupt(gr)
		fx.hitAt = r.now
	} else {
		r.accrueWait(gr)
	}
	for i, m := range gr.nodes {
		if m == n {
			gr.nodes[i], gr.placed, r.busy = -1, gr.placed-1, r.busy-s
			fx.lostFrom[i] = n
		}
	}
	if r.fx.rec.Kind == RecoverRestart {
		return r.restartWhole(gr)
	}
	if fx.stalled {
		return nil
	}
	fx.stalled, fx.waitMark = true, r.now
	bound := r.fx.rec.Timeout
	switch r.fx.rec.Kind {
	case RecoverAnywhere:
		bound = r.opt.Timeout
	case RecoverKueue:
		bound = 0 // fails fast in the next pass
	}
	if bound > 0 {
		heap.Push(&r.events, event{t: r.now + bound, kind: evReplaceTimeout, gang: gr.g.ID, gen: fx.gen})
	}
	return nil
}

// accrueWait counts the GPUs a stalled gang holds since the last mark.
func (r *runner) accrueWait(gr *gangRun) {
	if fx := gr.fx; fx.stalled {
		r.fx.g.WaitGPUh += float64(gr.placed*gr.g.GPUsPerPod) * float64(r.now-fx.waitMark) / 3600
		fx.waitMark = r.now
	}
}

// replacements places what it can of the stalled gangs' lost pods (before
// the queue: a replacement may use a spare node) and resumes the gangs
// that are whole again.
func (r *runner) replacements() error {
	for _, id := range r.ids {
		if gr := r.gangs[id]; gr.fx.stalled {
			if err := r.replace(gr); err != nil {
				return err
			}
		}
	}
	return nil
}

func (r *runner) replace(gr *gangRun) error {
	s, fx := gr.g.GPUsPerPod, gr.fx
	for i, m := range gr.nodes {
		if m >= 0 {
			continue
		}
		from := fx.lostFrom[i]
		n := r.c.replacement(r.fx.rec, from, s)
		if n < 0 && r.fx.rec.Kind == RecoverKueue {
			return r.restartWhole(gr)
		}
		if n < 0 {
			continue
		}
		r.accrueWait(gr)
		if err := r.c.take(n, s); err != nil {
			return fmt.Errorf("%s: replacement for gang %d: %w", r.p.Name(), gr.g.ID, err)
		}
		gr.nodes[i], gr.placed, r.busy = n, gr.placed+1, r.busy+s
		delete(fx.lostFrom, i)
		if mv, ok := r.p.(mover); ok {
			if err := mv.move(gr.g.ID, i, n); err != nil {
				return fmt.Errorf("%s: %w", r.p.Name(), err)
			}
		}
		if r.c.Fabric.LosesNVLink(from, n) {
			fx.degraded = true
			if !fx.lostLink {
				fx.lostLink = true
				r.fx.g.DomainLost++
			}
		}
	}
	if gr.placed < gr.g.Pods {
		return nil
	}
	r.accrueWait(gr)
	fx.stalled = false
	r.fx.g.InPlace++
	r.resume(gr, true)
	heap.Push(&r.events, event{t: fx.prog.EndAt(gr.g.Duration), kind: evDeparture, gang: gr.g.ID, gen: fx.gen})
	return nil
}

// restartWhole releases all of a gang's pods and puts it back in the queue
// in arrival order; it resumes from its checkpoint when placed again.
func (r *runner) restartWhole(gr *gangRun) error {
	if err := r.drop(gr); err != nil {
		return err
	}
	r.fx.g.WholeRestarts++
	pos := len(r.queue)
	for k, id := range r.queue {
		if id > gr.g.ID {
			pos = k
			break
		}
	}
	r.queue = slices.Insert(r.queue, pos, gr.g.ID)
	return nil
}

// drop releases a stalled or running gang's pods.
func (r *runner) drop(gr *gangRun) error {
	fx := gr.fx
	if fx.running {
		r.interrupt(gr)
	}
	r.accrueWait(gr)
	r.busy -= gr.placed * gr.g.GPUsPerPod
	fx.stalled, fx.degraded = false, false
	fx.gen++
	clear(fx.lostFrom)
	gr.start = -1
	return r.release(gr)
}

// noReplacement applies the policy when a stalled gang's bound passed.
func (r *runner) noReplacement(gr *gangRun) error {
	r.fx.g.NoReplacement++
	if r.fx.rec.Kind == RecoverAnywhere || r.fx.rec.OnLoss == OnLossRestart {
		return r.restartWhole(gr)
	}
	if r.fx.rec.OnLoss == OnLossFail {
		r.fx.g.Failed++
		gr.fx.failed, gr.fx.hitAt = true, -1
		return r.drop(gr)
	}
	return nil // Wait: keeps waiting, holding its nodes
}

// finishFailures ends the segments under way at the horizon and sums the
// useful work: every gang's kept work (a failed or requeued gang keeps its
// checkpoint).
func (r *runner) finishFailures() {
	for _, id := range r.ids {
		gr := r.gangs[id]
		fx := gr.fx
		if fx.running {
			done, cost := fx.prog.Stop(r.now)
			r.fx.g.add(cost, gr.g.GPUs())
			fx.work, fx.running = min(done, float64(gr.g.Duration)), false
		}
		r.accrueWait(gr)
		if fx.hitAt >= 0 { // not recovered by the horizon
			r.fx.g.Recoveries = append(r.fx.g.Recoveries, r.now-fx.hitAt)
		}
		r.fx.g.UsefulGPUh += fx.work * float64(gr.g.GPUs()) / 3600
	}
}
