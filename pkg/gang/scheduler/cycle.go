package scheduler

import (
	"context"
	"errors"
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/gpufabric/gpufabric/pkg/gang/assume"
	"github.com/gpufabric/gpufabric/pkg/gang/commit"
	"github.com/gpufabric/gpufabric/pkg/gang/gangless"
	"github.com/gpufabric/gpufabric/pkg/gang/gate"
	"github.com/gpufabric/gpufabric/pkg/gang/memberevents"
	"github.com/gpufabric/gpufabric/pkg/gang/placement"
	"github.com/gpufabric/gpufabric/pkg/gang/placement/cost"
	"github.com/gpufabric/gpufabric/pkg/gang/podstate"
	"github.com/gpufabric/gpufabric/pkg/gang/preemption"
	"github.com/gpufabric/gpufabric/pkg/gang/queue"
	"github.com/gpufabric/gpufabric/pkg/gang/ungate"
	"github.com/gpufabric/gpufabric/pkg/gang/vocab"
)

// scheduleKey runs one attempt for a gang key. Only an error wrapping
// gate.ErrAborted stops the worker.
func (s *Scheduler) scheduleKey(ctx context.Context, key string) error {
	cycle, begin := s.queue.Cycle(), time.Now()
	if s.assumed.Waiting(key, s.snaps.shown.Visible) {
		// Committed; the informers do not show it all yet. Look again soon
		// in case members were added meanwhile.
		s.queue.RetryAfter(key, time.Second)
		return nil
	}
	if vocab.IsCompositeKey(key) {
		if s.tree == nil {
			s.forget(key) // composites off: their PodGroups are flat gangs
			return nil
		}
		var err error
		s.handedOff, err = s.tree.Run(ctx, key)
		return err
	}
	isGroup, ns, name := queue.SplitKey(key)
	if !isGroup {
		return s.schedulePod(ctx, key, ns, name, cycle, begin)
	}
	pg, err := s.podGroups.PodGroups(ns).Get(name)
	if apierrors.IsNotFound(err) {
		s.status.replacer.Forget(key)
		s.status.podGroupMissing(ctx, ns, name)
		s.forget(key)
		return s.evict.GangDone(ctx, key)
	}
	if err != nil {
		return fmt.Errorf("get podgroup: %w", err)
	}
	if done, err := s.groupHeld(ctx, key, pg, cycle); done || err != nil {
		return err
	}
	ms, done, err := s.groupMembers(ctx, key, pg)
	if done || err != nil {
		return err
	}
	return s.scheduleGroup(ctx, key, pg, ms, cycle, begin)
}

// schedulePod runs one attempt for a pod without a PodGroup (a gang of
// one).
func (s *Scheduler) schedulePod(ctx context.Context, key, ns, name string, cycle uint64, begin time.Time) error {
	pod, err := s.pods.Pods(ns).Get(name)
	if err == nil && podstate.Ours(pod) && pod.Spec.NodeName == "" && len(pod.Spec.SchedulingGates) > 0 {
		s.status.markGated(ctx, []*v1.Pod{pod})
	}
	if apierrors.IsNotFound(err) || err == nil && !podstate.Pending(pod) {
		s.forget(key)
		return s.evict.GangDone(ctx, key)
	}
	if err != nil {
		return fmt.Errorf("get pod: %w", err)
	}
	if h, ok := s.cfg.Members.Hint(pod); ok && gangless.Untried(pod) {
		s.report.Event(pod, v1.EventTypeWarning, vocab.EventPlacedWithoutGang, "Scheduling", h.Message)
	}
	g, err := placement.NewPodGang(pod, s.getClaim)
	if err == nil {
		err = s.prepare(ctx, g)
	}
	a := &attempt{key: key, cycle: cycle, begin: begin, pod: pod, eff: preemption.ResolvePod(pod), members: []*v1.Pod{pod}}
	return s.place(ctx, a, g, err)
}

// groupHeld handles a PodGroup whose members are not placed now: deleting,
// a tree's leaf (placed with its tree), a half-done commit, failed, or its
// members still arriving. done: nothing more this attempt.
func (s *Scheduler) groupHeld(ctx context.Context, key string, pg *schedulingv1beta1.PodGroup, cycle uint64) (bool, error) {
	if pg.DeletionTimestamp != nil && s.commits.Record(pg.UID) == nil {
		// Its pods keep it (finalizer podgroup-protection) until they are
		// deleted; none of them is placed meanwhile.
		s.status.podGroupDeleting(ctx, pg)
		s.forget(key)
		return true, s.evict.GangDone(ctx, key)
	}
	if s.tree != nil && pg.Spec.ParentCompositePodGroupName != nil {
		if stop, err := s.leafTurn(ctx, key, pg); stop || err != nil {
			return true, err
		}
		return true, s.tree.Route(ctx, key, pg) // a tree's leaf is placed with its tree
	}
	if cm := s.commits.Record(pg.UID); cm != nil {
		// A commit of this gang is half done (a crash, or a failed undo):
		// finish or roll it back first, then look again once the informers
		// show it.
		if err := s.commits.RecoverRecord(ctx, cm); err != nil {
			if !gate.Stops(err) {
				s.queue.Park(key, cycle)
			}
			return true, err
		}
		s.queue.RetryAfter(key, time.Second)
		return true, nil
	}
	if failed, err := s.status.failed(ctx, pg); failed || err != nil {
		s.forget(key) // until the PodGroup is recreated
		return true, errors.Join(err, s.evict.GangDone(ctx, key))
	}
	return s.status.membersArriving(ctx, key, pg, cycle), nil
}

// groupMembers reads a PodGroup's members and runs its members-lost check
// and whole restart; done: nothing to place now (none pending, or it
// waits or restarts).
func (s *Scheduler) groupMembers(ctx context.Context, key string, pg *schedulingv1beta1.PodGroup) (*memberSet, bool, error) {
	ms, err := s.gangs.members(pg)
	if err != nil {
		return nil, true, err
	}
	s.status.markGated(ctx, ms.gated)
	if stop, err := s.checkMembers(ctx, key, pg, ms); stop || err != nil {
		return nil, true, err
	}
	restarting, replaced, err := s.restarts.RestartGang(ctx, pg, len(ms.pending), len(ms.running))
	if replaced {
		forgetOld(ms)
	}
	if err != nil || restarting {
		if !gate.Stops(err) {
			s.queue.RetryAfter(key, s.restarts.RetryIn(key)) // backs off while a PDB blocks it
			if err != nil {
				klog.FromContext(ctx).Error(err, "Restarting a gang whole", "podgroup", klog.KObj(pg))
			}
			err = nil
		}
		return nil, true, err
	}
	if len(ms.pending) == 0 {
		s.forget(key)
		return nil, true, s.evict.GangDone(ctx, key)
	}
	return ms, false, nil
}

// scheduleGroup builds a PodGroup's gang of its pending members and places
// it: late members join the placed gang in the domain it runs in.
func (s *Scheduler) scheduleGroup(ctx context.Context, key string, pg *schedulingv1beta1.PodGroup, ms *memberSet, cycle uint64, begin time.Time) error {
	group := pg
	if ms.anyBound {
		group = pg.DeepCopy()
		group.Spec.SchedulingPolicy.Gang = nil
	}
	g, err := placement.NewGang(group, ms.pending, s.getClaim)
	switch {
	case err == nil:
		g.BoundNodes = ms.boundNodes
		if !ms.anyBound { // a gang restarted whole goes back to its domain when it fits, and may use its spares
			g.BoundNodes = s.status.replacer.Prefer(key)
			g.PreviousNodes = g.BoundNodes
		}
		g.Running = ms.running // a segmented gang's late members join their segments
		if err = s.prepare(ctx, g); err == nil {
			// A gang no commit record can hold is refused before it is
			// placed, not at every commit.
			err = commit.RecordFits(g)
		}
	case errors.Is(err, placement.ErrNotReady) && len(ms.gated) > 0:
		err = fmt.Errorf("%w (%d members have scheduling gates)", err, len(ms.gated))
	}
	a := &attempt{key: key, cycle: cycle, begin: begin, pg: pg, eff: s.prios.Group(pg), members: ms.pending, late: ms.anyBound}
	s.prios.Tell(pg, a.eff)
	return s.place(ctx, a, g, err)
}

// leafTurn runs a tree leaf's own turn: a failed leaf's members go and
// nothing of it is placed again; a placed leaf's members-lost check runs
// (the replace room) and its whole restart (the evict room). stop: its
// tree is not tried now.
func (s *Scheduler) leafTurn(ctx context.Context, key string, pg *schedulingv1beta1.PodGroup) (bool, error) {
	if failed, err := s.status.failed(ctx, pg); failed || err != nil {
		s.forget(key)
		return true, errors.Join(err, s.evict.GangDone(ctx, key))
	}
	ms, err := s.gangs.members(pg)
	if err != nil {
		return true, err
	}
	ms.leaf, ms.wholeAbove = true, s.tree.WholeAbove(pg)
	if stop, err := s.checkMembers(ctx, key, pg, ms); stop || err != nil {
		return true, err
	}
	restarting, _, err := s.restarts.RestartGang(ctx, pg, len(ms.pending), len(ms.running))
	if err == nil && !restarting {
		return false, nil
	}
	if !gate.Stops(err) {
		s.queue.RetryAfter(key, s.restarts.RetryIn(key))
	}
	if err != nil && !gate.Stops(err) {
		klog.FromContext(ctx).Error(err, "Restarting a tree's leaf whole", "podgroup", klog.KObj(pg))
		err = nil
	}
	return true, err
}

// checkMembers runs the members-lost check of a placed gang (replace in
// place) and has the gang looked at again at its bound, or when a member
// is lost soon; stop: place nothing of it now. Only an error that stops
// the scheduler is returned.
func (s *Scheduler) checkMembers(ctx context.Context, key string, pg *schedulingv1beta1.PodGroup, ms *memberSet) (bool, error) {
	out, err := s.status.checkMembers(ctx, key, pg, ms)
	if gate.Stops(err) {
		return true, err
	} else if err != nil {
		klog.FromContext(ctx).Error(err, "Updating the members-lost condition", "podgroup", klog.KObj(pg))
	}
	retry := out.RetryIn
	if ms.recheck > 0 && (retry == 0 || ms.recheck < retry) {
		retry = ms.recheck
	}
	if retry > 0 {
		s.queue.RetryAfter(key, retry)
	}
	return out.Stop, nil
}

// place places a built gang and commits or reports the result.
func (s *Scheduler) place(ctx context.Context, a *attempt, g *placement.Gang, buildErr error) error {
	begin := time.Now()
	defer func() {
		if !a.async {
			s.cfg.Metrics.ObserveAttempt(a.result, time.Since(begin).Seconds())
		}
	}()
	logger := klog.LoggerWithValues(klog.FromContext(ctx), "gang", a.key)
	ctx = klog.NewContext(ctx, logger)
	switch {
	case errors.Is(buildErr, placement.ErrNotReady):
		logger.V(3).Info("Gang not ready", "reason", buildErr.Error())
		_, ns, _ := queue.SplitKey(a.key)
		s.queue.Wait(a.key, ns, a.cycle)
		return s.status.notReady(ctx, a, buildErr)
	case errors.Is(buildErr, placement.ErrUnsupported) || errors.Is(buildErr, placement.ErrInvalid):
		// Until the pod changes (most of these fields are immutable).
		return s.refuse(ctx, a, ReasonUnsupported, vocab.ReasonUnschedulable, buildErr.Error())
	case buildErr != nil:
		return s.refuse(ctx, a, ReasonSchedulerError, vocab.ReasonSchedulerError, buildErr.Error())
	}
	start := time.Now()
	d, u, err := s.decide(ctx, a, g)
	s.cfg.Metrics.ObservePlacement(time.Since(start).Seconds())
	switch {
	case err != nil:
		return s.refuse(ctx, a, ReasonSchedulerError, vocab.ReasonSchedulerError, err.Error())
	case u != nil && u.TimedOut != nil:
		// Its own claims cost it the attempt: no preemption (which would
		// place it again, at the same cost), a harder backoff.
		return s.refuse(ctx, a, ReasonTimedOut, vocab.ReasonTimedOut, u.Message)
	case u != nil:
		return s.unplaced(ctx, a, g, u)
	}
	// attempt: since the attempt began (members read, gang built,
	// snapshot, Place); duration: snapshot and Place.
	logger.V(2).Info("Placed gang", "domain", d.Domain, "key", d.TopologyKey, "pods", len(d.Pods), "claims", len(d.Claims),
		"duration", time.Since(start), "attempt", time.Since(a.begin))
	return s.commitPlaced(ctx, a, g, d, begin)
}

// decide places gang g on a snapshot of this attempt, within its budget:
// calls (Config.Placement.Budget) and time from now, with the gang's
// memory of its expensive calls. A gang restarted whole that does not fit
// its previous domain is placed wherever it fits best now, unless its
// policy keeps it waiting there.
func (s *Scheduler) decide(ctx context.Context, a *attempt, g *placement.Gang) (*placement.Decision, *placement.Unschedulable, error) {
	snap, err := s.snaps.snapshot(ctx, s.evict.Held(a.preemptor()))
	if err != nil {
		return nil, nil, err
	}
	cfg := s.cfg.Placement
	cfg.Budget.Deadline = cost.DeadlineFor(time.Now(), s.cfg.PlacementTime, len(g.Members))
	g.Memory = s.costs.For(a.key)
	defer func() { s.costs.Keep(a.key, g.Memory) }()
	d, u, err := placement.Place(ctx, cfg, snap, g)
	if u != nil && err == nil && len(g.BoundNodes) > 0 && a.pg != nil && !a.late {
		if stay := s.status.replacer.Stays(a.key, a.pg); stay != "" {
			u.Message += "; " + stay // its policy keeps it waiting for its previous domain
		} else {
			g.BoundNodes = nil // its previous domain is full: wherever it fits best now
			d, u, err = placement.Place(ctx, cfg, snap, g)
		}
	}
	return d, u, err
}

// unplaced refuses a gang no domain holds now, after the evict room
// advanced or started its preemption, or reserved a domain for it.
func (s *Scheduler) unplaced(ctx context.Context, a *attempt, g *placement.Gang, u *placement.Unschedulable) error {
	if len(s.evict.Held(a.preemptor())) == 0 {
		// Held nodes come back without a claim's event.
		a.short = devicesShort(g, u)
	}
	msg := u.Message
	if note := s.evict.HeldNote(a.preemptor()); note != "" {
		msg = note + "\n" + msg // not "no node carries this label" alone
	}
	if !s.cfg.DisablePreemption {
		// Preemption plans on the listers, which do not show the commits
		// in flight: let them land first.
		s.pipe.Wait()
	}
	in, err := s.snaps.inputFor(s.evict.Held(a.preemptor()))
	var extra string
	if err == nil {
		extra, err = s.evict.AfterRefusal(ctx, a.preemptor(), g, in)
	}
	if gate.Stops(err) {
		return err
	}
	if err != nil {
		klog.FromContext(ctx).Error(err, "Preemption failed")
		extra = "preemption failed: " + err.Error()
	}
	if extra != "" {
		msg += "\n" + extra
	}
	return s.refuse(ctx, a, ReasonUnschedulable, vocab.ReasonUnschedulable, msg)
}

// commitPlaced assumes decision d and commits it: here with SerialCommits,
// else in the pipeline beside the worker, which reports the attempt
// (begin: when place began). Only a serial commit's error is returned.
func (s *Scheduler) commitPlaced(ctx context.Context, a *attempt, g *placement.Gang, d *placement.Decision, begin time.Time) error {
	s.assumed.AddInFlight(a.key, assume.Part{Gang: g, Decision: d})
	s.cfg.Metrics.SetAssumed(s.assumed.Len())
	if s.cfg.SerialCommits {
		txn := s.commits.Begin(a.pg, g, d)
		err := txn.Run(ctx)
		return s.afterCommit(ctx, a, g, d, txn.Written(), err)
	}
	a.async, s.handedOff = true, true
	s.pipe.Start(func() error {
		defer s.queue.Done(a.key)
		txn := s.commits.Begin(a.pg, g, d)
		err := txn.Run(ctx)
		err = s.afterCommit(ctx, a, g, d, txn.Written(), err)
		s.cfg.Metrics.ObserveAttempt(a.result, time.Since(begin).Seconds())
		if err != nil && !gate.Stops(err) && ctx.Err() == nil {
			klog.FromContext(ctx).Error(err, "Committing a placed gang failed")
		}
		return err
	})
	return nil
}

// afterCommit reports a commit's result: a lost race is retried after its
// conflict backoff, a
// failure parks the gang, a success ends the gang's attempts (its decision
// stays assumed until the informers show it). Safe to run beside the
// worker (pipelined commits).
func (s *Scheduler) afterCommit(ctx context.Context, a *attempt, g *placement.Gang, d *placement.Decision, written map[types.UID]string, err error) error {
	logger := klog.FromContext(ctx)
	switch {
	case gate.Stops(err):
		return err // nothing may be undone; the entry goes with this term
	case errors.Is(err, commit.ErrConflict):
		// Retried with a backoff that grows with each conflict; the parked
		// gangs are woken only if its retry does not take the devices it
		// assumed back (queue.RetryConflict).
		s.assumed.Drop(a.key)
		a.result = resultConflict
		s.cfg.Metrics.GangRefused(ReasonConflict)
		backoff := s.queue.RetryConflict(a.key)
		logger.V(2).Info("Commit lost a race, retrying on a fresh snapshot", "err", err, "backoff", backoff)
		return nil
	case err != nil:
		s.assumed.Drop(a.key)
		s.queue.FlushParked() // the devices it assumed are free again
		a.result = resultError
		s.pending.set(a.key, ReasonCommitError)
		s.cfg.Metrics.GangRefused(ReasonCommitError)
		s.report.Event(a.about(), v1.EventTypeWarning, vocab.EventFailedScheduling, "Binding", "commit failed: "+err.Error())
		s.queue.ParkError(a.key, a.cycle)
		return err
	}
	s.assumed.Complete(a.key, written)
	a.result = resultPlaced
	if err := s.evict.GangDone(ctx, a.key); gate.Stops(err) {
		return err
	} else if err != nil {
		logger.Error(err, "Ending the gang's nomination")
	}
	s.forget(a.key)
	s.cfg.Metrics.GangPlaced()
	ungated := s.inf.ungated.Take(a.key) // the members bound now are no longer gated
	if since, ok := gangWaitSince(a); ok {
		s.cfg.Metrics.ObserveGangWait(resultPlaced, time.Since(ungate.Later(since, ungated)).Seconds())
	}
	s.report.Event(a.about(), v1.EventTypeNormal, vocab.EventScheduled, "Binding", commit.PlacedMessage(g, d))
	for _, w := range d.Warnings {
		s.report.Event(a.about(), v1.EventTypeWarning, vocab.EventPreferenceIgnored, "Scheduling", w)
	}
	if left := len(g.Members) - len(d.Pods); left > 0 {
		// The others wait for room in the same domain (minCount below the
		// gang's size); say so on them.
		s.status.markWaiting(ctx, a, g, d)
	}
	return nil
}

// refuse reports a gang that was not placed: metric, condition (PodGroups),
// event, and backoff.
func (s *Scheduler) refuse(ctx context.Context, a *attempt, metricReason, conditionReason, message string) error {
	a.result = resultUnschedulable
	if metricReason == ReasonSchedulerError {
		a.result = resultError
	}
	s.pending.set(a.key, metricReason)
	s.cfg.Metrics.GangRefused(metricReason)
	var backoff time.Duration
	switch {
	case metricReason == ReasonSchedulerError:
		backoff = s.queue.ParkError(a.key, a.cycle)
	case metricReason == ReasonTimedOut:
		backoff = s.queue.ParkTimedOut(a.key, a.cycle)
	case s.evict.Nominated(a.key):
		backoff = s.queue.ParkShort(a.key, a.cycle) // its victims are going
	case a.short > 0:
		backoff = s.queue.ParkDevicesShort(a.key, a.cycle, a.short)
	default:
		backoff = s.queue.Park(a.key, a.cycle)
	}
	klog.FromContext(ctx).V(2).Info("Gang not placed", "reason", conditionReason, "message", message, "backoff", backoff)
	s.report.Event(a.about(), v1.EventTypeWarning, vocab.EventFailedScheduling, "Scheduling", message)
	s.status.markUnschedulable(ctx, a, message, memberevents.Note{
		EventType: v1.EventTypeWarning, Reason: vocab.EventFailedScheduling, Why: conditionReason, Message: message,
	})
	if a.pg == nil {
		return nil
	}
	return s.conditions.SetInitiallyScheduled(ctx, a.pg, metav1.ConditionFalse, conditionReason, message)
}

// forget drops a gang from the queue and from the pending metric.
func (s *Scheduler) forget(key string) {
	s.queue.Forget(key)
	s.prios.Forget(key)
	s.costs.Forget(key)
	s.pending.clear(key)
	s.status.forget(key)
}
