package trees

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"github.com/gpufabric/gpufabric/pkg/gang/assume"
	"github.com/gpufabric/gpufabric/pkg/gang/commit"
	"github.com/gpufabric/gpufabric/pkg/gang/composite"
	"github.com/gpufabric/gpufabric/pkg/gang/gate"
	"github.com/gpufabric/gpufabric/pkg/gang/metrics"
	"github.com/gpufabric/gpufabric/pkg/gang/placement/cost"
	"github.com/gpufabric/gpufabric/pkg/gang/vocab"
)

// place places the tree on a snapshot and commits it, or refuses it.
func (c *Cycle) place(ctx context.Context, a *attempt, group *composite.Group) (bool, error) {
	start := time.Now()
	snap, err := c.d.Snapshot(ctx, c.held(a))
	var d *composite.Decision
	var u *composite.Unschedulable
	if err == nil {
		cfg := c.d.Placement
		cfg.Budget.Deadline = cost.DeadlineFor(time.Now(), c.d.PlacementTime, a.pods())
		opts := composite.Options{PlaceCalls: c.d.PlaceCalls}
		d, u, err = composite.Place(ctx, cfg, snap, group, opts)
		if u != nil && err == nil {
			again, stays := a.unpin()
			if again {
				d, u, err = composite.Place(ctx, cfg, snap, group, opts)
			}
			if u != nil && stays != "" {
				u.Message += "; " + stays
			}
		}
	}
	c.d.Metrics.ObservePlacement(time.Since(start).Seconds())
	switch {
	case err != nil:
		return false, c.refuse(ctx, a, metrics.ReasonSchedulerError, vocab.ReasonSchedulerError, err.Error())
	case u != nil:
		msg, err := c.afterRefusal(ctx, a, group, u.Message)
		if err != nil {
			return false, err
		}
		return false, c.refuse(ctx, a, metrics.ReasonUnschedulable, vocab.ReasonUnschedulable, msg)
	}
	byName := make(map[string]*leafState, len(a.leaves))
	for _, l := range a.leaves {
		byName[l.pg.Name] = l
	}
	var parts []assume.Part
	var placed []commit.Leaf
	for _, l := range d.Leaves {
		parts = append(parts, assume.Part{Gang: l.Group.Gang, Decision: l.Decision})
		placed = append(placed, commit.Leaf{PodGroup: byName[l.Group.Gang.Name].pg, Gang: l.Group.Gang, Decision: l.Decision})
	}
	root := a.root
	txn, err := c.d.Commits.BeginTree(commit.Root{Kind: commit.KindCompositePodGroup, Namespace: root.Namespace, Name: root.Name, UID: root.UID}, placed)
	if err != nil {
		return false, c.refuse(ctx, a, metrics.ReasonSchedulerError, vocab.ReasonSchedulerError, err.Error())
	}
	klog.FromContext(ctx).V(2).Info("Placed tree", "pods", d.Pods(), "podGroups", len(d.Leaves), "where", d.Summary(),
		"placeCalls", d.Stats.PlaceCalls, "searches", d.Stats.Searches, "duration", time.Since(start), "attempt", time.Since(a.begin))
	c.d.Assumed.AddInFlight(a.key, parts...)
	c.d.Metrics.SetAssumed(c.d.Assumed.Len())
	c.d.Pipeline.Start(func() error {
		defer c.d.Queue.Done(a.key)
		err := c.after(ctx, a, d, txn, txn.Run(ctx))
		c.d.Metrics.ObserveAttempt(attemptResult(err), time.Since(a.begin).Seconds())
		return err
	})
	return true, nil
}

// unpin lets the leaves restarted whole that the tree's search pinned to
// their previous domain go wherever the tree fits best, unless their
// policy keeps them there (stays says so); again: a leaf was unpinned.
func (a *attempt) unpin() (again bool, stays string) {
	var why []string
	for _, l := range a.sorted() {
		if l.gang == nil || len(l.ms.Previous) == 0 || l.ms.AnyBound || len(l.gang.BoundNodes) == 0 {
			continue
		}
		if l.ms.Stays != "" {
			why = append(why, fmt.Sprintf("PodGroup %s: %s", l.pg.Name, l.ms.Stays))
			continue
		}
		l.gang.BoundNodes, again = nil, true
	}
	return again, strings.Join(why, "; ")
}

// pods counts the waiting members of the tree.
func (a *attempt) pods() int {
	n := 0
	for _, l := range a.leaves {
		n += len(l.ms.Pending)
	}
	return n
}

// after reports a tree's commit, as the loop reports a gang's, with the
// events on the root CompositePodGroup (the leaves' conditions are the
// commit's).
func (c *Cycle) after(ctx context.Context, a *attempt, d *composite.Decision, txn *commit.Txn, err error) error {
	switch {
	case gate.Stops(err):
		return err
	case errors.Is(err, commit.ErrConflict):
		c.d.Assumed.Drop(a.key)
		c.d.Metrics.GangRefused(metrics.ReasonConflict)
		backoff := c.d.Queue.RetryConflict(a.key)
		klog.FromContext(ctx).V(2).Info("Tree commit lost a race, retrying on a fresh snapshot", "err", err, "backoff", backoff)
		return nil
	case err != nil:
		c.d.Assumed.Drop(a.key)
		c.d.Queue.FlushParked()
		c.d.Pending(a.key, metrics.ReasonCommitError)
		c.d.Metrics.GangRefused(metrics.ReasonCommitError)
		c.d.Report.Event(a.root, v1.EventTypeWarning, vocab.EventFailedScheduling, "Binding", "commit failed: "+err.Error())
		c.d.Queue.ParkError(a.key, a.cycle)
		return err
	}
	c.d.Assumed.Complete(a.key, txn.Written())
	if err := c.d.Done(ctx, a.key); gate.Stops(err) {
		return err
	}
	c.d.Forget(a.key)
	c.d.Metrics.GangPlaced()
	c.d.Report.Event(a.root, v1.EventTypeNormal, vocab.EventScheduled, "Binding",
		fmt.Sprintf("placed %d pods of %d PodGroups: %s", d.Pods(), len(d.Leaves), d.Summary()))
	return nil
}

// attemptResult is attempt_duration_seconds' result of a commit's error.
func attemptResult(err error) string {
	switch {
	case err == nil:
		return metrics.ResultPlaced
	case errors.Is(err, commit.ErrConflict):
		return metrics.ResultConflict
	}
	return metrics.ResultError
}

// refuse reports a tree that was not placed: the metric, an event on the
// root, the InitiallyScheduled condition on every leaf PodGroup (as
// kube-scheduler writes it on a tree's leaves) and PodScheduled on the
// waiting pods, then the backoff.
func (c *Cycle) refuse(ctx context.Context, a *attempt, metricReason, conditionReason, message string) error {
	c.d.Pending(a.key, metricReason)
	c.d.Metrics.GangRefused(metricReason)
	var backoff time.Duration
	switch {
	case metricReason == metrics.ReasonSchedulerError:
		backoff = c.d.Queue.ParkError(a.key, a.cycle)
	case c.d.Evictor != nil && c.d.Evictor.Nominated(a.key):
		backoff = c.d.Queue.ParkShort(a.key, a.cycle) // its victims are going
	default:
		backoff = c.d.Queue.Park(a.key, a.cycle)
	}
	klog.FromContext(ctx).V(2).Info("Tree not placed", "reason", conditionReason, "message", message, "backoff", backoff)
	c.d.Report.Event(a.root, v1.EventTypeWarning, vocab.EventFailedScheduling, "Scheduling", message)
	msg := fmt.Sprintf("composite pod group %s/%s: %s", a.root.Namespace, a.root.Name, message)
	for _, l := range a.leaves {
		c.d.SetPods(ctx, l.ms.Pending, v1.PodReasonUnschedulable, msg)
		if err := c.d.Conditions.SetInitiallyScheduled(ctx, l.pg, metav1.ConditionFalse, conditionReason, msg); gate.Stops(err) {
			return err
		} else if err != nil {
			klog.FromContext(ctx).Error(err, "Setting a leaf's condition", "podgroup", klog.KObj(l.pg))
		}
	}
	return nil
}
