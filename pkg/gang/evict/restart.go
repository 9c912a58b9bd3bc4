package evict

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/gpufabric/gpufabric/pkg/gang/gate"
	"github.com/gpufabric/gpufabric/pkg/gang/podstate"
	"github.com/gpufabric/gpufabric/pkg/gang/vocab"
)

// Whole-gang restart (docs/design/health.md): when a taint manager deletes
// a running member of a placed PodGroup whose disruptionMode is All (a
// device NoExecute taint: a fatal Xid, a double-bit ECC error; or a node
// NoExecute taint), the gang cannot go on without it. The scheduler marks
// the PodGroup DisruptionTarget=True (reason MemberDisrupted; its
// lastTransitionTime is the restart's boundary), evicts every member that
// was running before the boundary through the Eviction API, releases the
// PodGroup's shared claims once they are gone, and then places the
// members the workload's controller creates again as a new gang, whole,
// wherever it fits. The condition goes back to False (GangRestarted) once
// the new gang runs. The condition carries the restart over a scheduler
// restart; the taint manager's reason is seen on the pod update that
// precedes its deletion.
const (
	// reasonDeviceTaintManager is kube-controller-manager's
	// DisruptionTarget reason for a pod deleted for a device NoExecute
	// taint (pkg/controller/devicetainteviction).
	reasonDeviceTaintManager = "DeletionByDeviceTaintManager"
	// reasonNodeTaintManager is its reason for a node NoExecute taint.
	reasonNodeTaintManager = "DeletionByTaintManager"
)

// taintDisruption returns the reason of a pod's DisruptionTarget condition
// when a taint manager (device or node) deletes it, "" otherwise.
func taintDisruption(p *v1.Pod) string {
	for _, c := range p.Status.Conditions {
		if c.Type == v1.DisruptionTarget && c.Status == v1.ConditionTrue &&
			(c.Reason == reasonDeviceTaintManager || c.Reason == reasonNodeTaintManager) {
			return c.Reason
		}
	}
	return ""
}

// Disruptions remembers, per PodGroup key, the last member a taint manager
// deleted, from the informer events (the pod may be gone before its gang's
// turn): the loop's pod informer notes them, the Restarter takes them. The
// zero value is ready; safe for concurrent use.
type Disruptions struct {
	mu sync.Mutex
	m  map[string]string
}

// Note records p when it is a bound member of ours that a taint manager
// deletes; it reports whether it did.
func (d *Disruptions) Note(p *v1.Pod) bool {
	if !podstate.Ours(p) || podGroupName(p) == "" || p.Spec.NodeName == "" {
		return false
	}
	reason := taintDisruption(p)
	if reason == "" {
		return false
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.m == nil {
		d.m = map[string]string{}
	}
	d.m[keyOf(p)] = fmt.Sprintf("%s on %s (%s)", p.Name, p.Spec.NodeName, reason)
	return true
}

// take returns and forgets the PodGroup's recorded disruption.
func (d *Disruptions) take(key string) string {
	d.mu.Lock()
	defer d.mu.Unlock()
	cause := d.m[key]
	delete(d.m, key)
	return cause
}

// restore puts back a disruption taken for a restart that could not
// start (an API error): the gang's next turn tries again, unless a newer
// one was noted meanwhile.
func (d *Disruptions) restore(key, cause string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.m == nil {
		d.m = map[string]string{}
	}
	if _, newer := d.m[key]; !newer {
		d.m[key] = cause
	}
}

// wholeDisruption reports whether a PodGroup is disrupted only whole.
func wholeDisruption(pg *schedulingv1beta1.PodGroup) bool {
	dm := pg.Spec.DisruptionMode
	return dm != nil && dm.All != nil
}

// Restarter restarts PodGroups disrupted only whole (disruptionMode All)
// when a taint manager deleted a member: the rules above. One per
// leadership term; safe for concurrent use.
type Restarter struct {
	cfg *Config
	w   *writer
}

// NewRestarter returns the Restarter for cfg (its Disruptions are the ones
// the loop's pod informer notes).
func NewRestarter(cfg Config) *Restarter {
	r := &Restarter{cfg: &cfg}
	r.w = &writer{cfg: r.cfg}
	return r
}

// RestartGang runs the whole-gang restart of pg, whose members now are
// pending (waiting to be placed) and running. It returns going=true while
// the old members are going: nothing of the gang is placed meanwhile.
// After that it returns replaced=true while the members left are the
// restart's new gang: the loop forgets the old members (the finished or
// failed ones no longer make the new ones late members), so the new
// members are placed as a gang; it ends the restart once that gang runs.
func (r *Restarter) RestartGang(ctx context.Context, pg *schedulingv1beta1.PodGroup, pending, running int) (going, replaced bool, err error) {
	cause := r.cfg.Disruptions.take(vocab.PodGroupKey(pg.Namespace, pg.Name))
	if !wholeDisruption(pg) {
		return false, false, nil
	}
	cond := meta.FindStatusCondition(pg.Status.Conditions, schedulingv1beta1.DisruptionTarget)
	active := cond != nil && cond.Status == metav1.ConditionTrue
	var boundary time.Time
	switch {
	case active && cond.Reason == vocab.ReasonMemberDisrupted:
		boundary = cond.LastTransitionTime.Time
	case cause != "":
		if boundary, err = r.startRestart(ctx, pg, active, cause); err != nil {
			r.cfg.Disruptions.restore(vocab.PodGroupKey(pg.Namespace, pg.Name), cause)
			return true, false, err
		}
	case active && cond.Reason == vocab.ReasonReplacingMembers:
		return false, true, r.replaced(ctx, pg, pending, running)
	default:
		return false, false, nil
	}
	old, err := r.evictOldMembers(ctx, pg, boundary)
	if err != nil || old > 0 {
		return true, false, err
	}
	// Once: a released claim may be the new gang's on the next turn.
	if err := r.releaseSharedClaims(ctx, pg); err != nil {
		return true, false, err
	}
	// Same status: the boundary (lastTransitionTime) stays.
	err = r.cfg.Conditions.SetCondition(ctx, pg, metav1.Condition{Type: schedulingv1beta1.DisruptionTarget, Status: metav1.ConditionTrue,
		Reason: vocab.ReasonReplacingMembers, Message: fmt.Sprintf("%s: the old members are gone; the group is placed again, whole, when its controller recreates them", schedulerName)})
	if err != nil {
		return true, false, err
	}
	return false, true, r.replaced(ctx, pg, pending, running)
}

// replaced ends the restart once the new gang runs: none of it waits and
// some of it runs.
func (r *Restarter) replaced(ctx context.Context, pg *schedulingv1beta1.PodGroup, pending, running int) error {
	if pending > 0 || running == 0 {
		return nil
	}
	return r.cfg.Conditions.SetCondition(ctx, pg, metav1.Condition{Type: schedulingv1beta1.DisruptionTarget, Status: metav1.ConditionFalse,
		Reason: vocab.ReasonGangRestarted, Message: fmt.Sprintf("%s: the group was restarted whole and runs again", schedulerName)})
}

// startRestart marks the PodGroup DisruptionTarget=True/MemberDisrupted
// and returns the restart's boundary, its lastTransitionTime. A condition
// already True (a preemption, a restart whose new gang lost a member) is
// set False first, so that the boundary is this restart's.
func (r *Restarter) startRestart(ctx context.Context, pg *schedulingv1beta1.PodGroup, active bool, cause string) (time.Time, error) {
	if active {
		err := r.cfg.Conditions.SetCondition(ctx, pg, metav1.Condition{Type: schedulingv1beta1.DisruptionTarget, Status: metav1.ConditionFalse,
			Reason: vocab.ReasonGangRestarted, Message: schedulerName + ": superseded by a new restart"})
		if err != nil {
			return time.Time{}, err
		}
	}
	msg := fmt.Sprintf("%s: member %s was deleted by a taint manager and the group is disrupted only whole: evicting the other members; the group is placed again when its controller recreates them",
		schedulerName, cause)
	boundary := time.Now().Truncate(time.Second)
	if err := r.cfg.Conditions.SetCondition(ctx, pg, metav1.Condition{Type: schedulingv1beta1.DisruptionTarget, Status: metav1.ConditionTrue,
		Reason: vocab.ReasonMemberDisrupted, Message: msg, LastTransitionTime: metav1.NewTime(boundary)}); err != nil {
		return time.Time{}, err
	}
	r.cfg.Report.Event(pg, v1.EventTypeWarning, vocab.EventGangRestart, "Restarting", msg)
	klog.FromContext(ctx).Info("Restarting a gang whole", "podgroup", klog.KObj(pg), "cause", cause)
	return boundary, nil
}

// evictOldMembers evicts the members bound before boundary that still run
// and returns how many old bound members are left (running or going).
func (r *Restarter) evictOldMembers(ctx context.Context, pg *schedulingv1beta1.PodGroup, boundary time.Time) (int, error) {
	pods, err := r.cfg.Gangs.GroupPods(pg.Namespace, pg.Name)
	if err != nil {
		return 0, fmt.Errorf("list members: %w", err)
	}
	left := 0
	for _, p := range pods {
		if !podstate.Ours(p) || p.Spec.NodeName == "" || p.CreationTimestamp.After(boundary) || podstate.Terminated(p) {
			continue
		}
		left++
		if p.DeletionTimestamp != nil {
			continue
		}
		if err := r.evictMember(ctx, p); err != nil {
			return left, err
		}
	}
	return left, nil
}

// evictMember evicts one member of a gang being restarted through the
// Eviction API (its PodDisruptionBudgets apply; a refusal is retried on the
// gang's next turn).
func (r *Restarter) evictMember(ctx context.Context, p *v1.Pod) error {
	err := r.w.evict(ctx, p)
	switch {
	case errors.Is(err, gate.ErrAborted) || errors.Is(err, gate.ErrFenced):
		return err
	case err == nil:
		r.cfg.Report.Event(p, v1.EventTypeWarning, vocab.EventGangRestart, "Evicting", fmt.Sprintf("%s: another member of PodGroup %s was lost; the group restarts whole", schedulerName, podGroupName(p)))
		return nil
	case apierrors.IsNotFound(err) || apierrors.IsConflict(err):
		return nil
	case apierrors.IsTooManyRequests(err):
		klog.FromContext(ctx).Info("Eviction of a gang member refused; retrying", "pod", klog.KObj(p), "err", err.Error())
		return nil
	}
	return fmt.Errorf("evict %s/%s: %w", p.Namespace, p.Name, err)
}

// releaseSharedClaims releases the PodGroup's shared claims, so the new
// gang may go to another domain.
func (r *Restarter) releaseSharedClaims(ctx context.Context, pg *schedulingv1beta1.PodGroup) error {
	for _, st := range pg.Status.ResourceClaimStatuses {
		if st.ResourceClaimName == nil {
			continue
		}
		c, err := r.cfg.Claims.ResourceClaims(pg.Namespace).Get(*st.ResourceClaimName)
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return fmt.Errorf("get shared claim: %w", err)
		}
		if _, err := r.cfg.Releaser.ReleaseClaim(ctx, pg.Namespace, c.Name, c.UID, map[types.UID]bool{pg.UID: true}, everyAllocation); err != nil && !errors.Is(err, context.Canceled) {
			return err
		}
	}
	return nil
}
