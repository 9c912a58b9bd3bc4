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
	"k8s.io/utils/clock"

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
	m  map[string]disruption
}

// disruption is a gang's recorded disruption: why (a sentence), and
// anyMode when it restarts the gang whatever its disruption mode (the
// replace room's Restart).
type disruption struct {
	why     string
	anyMode bool
}

var _ interface{ Restart(key, why string) } = (*Disruptions)(nil)

// Restart records that the gang key restarts whole whatever its
// disruption mode (pkg/gang/replace: a member lost to a trigger in a gang
// disrupted only whole, or the policy Restart); why says what was lost.
func (d *Disruptions) Restart(key, why string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.m == nil {
		d.m = map[string]disruption{}
	}
	d.m[key] = disruption{why: why, anyMode: true}
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
		d.m = map[string]disruption{}
	}
	if d.m[keyOf(p)].anyMode {
		return true // a restart asked for already says more
	}
	d.m[keyOf(p)] = disruption{why: fmt.Sprintf("member %s on %s (%s) was deleted by a taint manager and the group is disrupted only whole", p.Name, p.Spec.NodeName, reason)}
	return true
}

// take returns and forgets the PodGroup's recorded disruption.
func (d *Disruptions) take(key string) disruption {
	d.mu.Lock()
	defer d.mu.Unlock()
	cause := d.m[key]
	delete(d.m, key)
	return cause
}

// restore puts back a disruption taken for a restart that could not
// start (an API error): the gang's next turn tries again, unless a newer
// one was noted meanwhile.
func (d *Disruptions) restore(key string, cause disruption) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.m == nil {
		d.m = map[string]disruption{}
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

// RestartRetry is how soon the loop looks at a restarting gang again while
// its old members go; RestartBackoffCap caps the backoff of a restart
// whose evictions a PodDisruptionBudget refuses.
const (
	RestartRetry      = time.Second
	RestartBackoffCap = 5 * time.Minute
)

// Restarter restarts PodGroups disrupted only whole (disruptionMode All)
// when a taint manager deleted a member: the rules above. One per
// leadership term; safe for concurrent use.
//
// A restart whose evictions are refused (a PodDisruptionBudget allows no
// disruption) backs off per gang: no member is evicted again before
// RestartRetry doubled per refused round (up to RestartBackoffCap); the
// first refused round of a restart records an event and says so in the
// DisruptionTarget condition, once.
type Restarter struct {
	cfg   *Config
	w     *writer
	clock clock.PassiveClock

	mu sync.Mutex
	// blocked: restarts whose last eviction round was refused, by gang
	// key.
	blocked map[string]*restartBlock
	// claims: the old members' claims of restarts under way, by gang key
	// (restartclaims.go).
	claims map[string]*oldClaims
}

// restartBlock is the backoff of one restart (its boundary) whose
// evictions were refused.
type restartBlock struct {
	boundary time.Time
	// rounds refused in a row; no eviction before next.
	rounds int
	next   time.Time
}

// NewRestarter returns the Restarter for cfg (its Disruptions are the ones
// the loop's pod informer notes).
func NewRestarter(cfg Config) *Restarter {
	r := &Restarter{cfg: &cfg, clock: cfg.Clock, blocked: map[string]*restartBlock{}, claims: map[string]*oldClaims{}}
	if r.clock == nil {
		r.clock = clock.RealClock{}
	}
	r.w = &writer{cfg: r.cfg}
	return r
}

// RetryIn is how soon the loop should look at a restarting gang again:
// RestartRetry, or the rest of its backoff while a PodDisruptionBudget
// blocks its evictions.
func (r *Restarter) RetryIn(key string) time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	if b := r.blocked[key]; b != nil {
		if d := b.next.Sub(r.clock.Now()); d > RestartRetry {
			return d
		}
	}
	return RestartRetry
}

// backingOff reports whether the restart at boundary waits out its
// backoff.
func (r *Restarter) backingOff(key string, boundary time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	b := r.blocked[key]
	if b != nil && !b.boundary.Equal(boundary) {
		delete(r.blocked, key) // an older restart's
		return false
	}
	return b != nil && r.clock.Now().Before(b.next)
}

// refusedRound records an eviction round of the restart at boundary that
// was refused and returns whether it is the restart's first.
func (r *Restarter) refusedRound(key string, boundary time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	b := r.blocked[key]
	first := b == nil || !b.boundary.Equal(boundary)
	if first {
		b = &restartBlock{boundary: boundary}
		r.blocked[key] = b
	}
	b.rounds++
	d := RestartRetry << min(b.rounds, 20)
	if d <= 0 || d > RestartBackoffCap {
		d = RestartBackoffCap
	}
	b.next = r.clock.Now().Add(d)
	return first
}

// unblock ends a gang's restart backoff.
func (r *Restarter) unblock(key string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.blocked, key)
}

// RestartGang runs the whole-gang restart of pg, whose members now are
// pending (waiting to be placed) and running. It returns going=true while
// the old members are going, and then while their own claims still hold
// devices (at most ClaimRelease): nothing of the gang is placed meanwhile.
// After that it returns replaced=true while the members left are the
// restart's new gang: the loop forgets the old members (the finished or
// failed ones no longer make the new ones late members), so the new
// members are placed as a gang; it ends the restart once that gang runs.
func (r *Restarter) RestartGang(ctx context.Context, pg *schedulingv1beta1.PodGroup, pending, running int) (going, replaced bool, err error) {
	key := vocab.PodGroupKey(pg.Namespace, pg.Name)
	cause := r.cfg.Disruptions.take(key)
	cond := meta.FindStatusCondition(pg.Status.Conditions, schedulingv1beta1.DisruptionTarget)
	active := cond != nil && cond.Status == metav1.ConditionTrue
	restarting := active && (cond.Reason == vocab.ReasonMemberDisrupted || cond.Reason == vocab.ReasonReplacingMembers)
	if !wholeDisruption(pg) && !cause.anyMode && !restarting {
		r.unblock(key)
		return false, false, nil
	}
	var boundary time.Time
	switch {
	case active && cond.Reason == vocab.ReasonMemberDisrupted:
		boundary = cond.LastTransitionTime.Time
	case cause.why != "":
		if boundary, err = r.startRestart(ctx, pg, active, cause); err != nil {
			r.cfg.Disruptions.restore(vocab.PodGroupKey(pg.Namespace, pg.Name), cause)
			return true, false, err
		}
	case active && cond.Reason == vocab.ReasonReplacingMembers:
		r.unblock(key)
		return false, true, r.replaced(ctx, pg, pending, running)
	default:
		r.unblock(key)
		return false, false, nil
	}
	old, err := r.evictOldMembers(ctx, pg, boundary)
	if err != nil || old > 0 {
		return true, false, err
	}
	if r.claimsHeld(key, pg.Namespace, boundary) {
		// Their devices come back soon: the new gang then sees its
		// previous domain as it is.
		klog.FromContext(ctx).V(4).Info("Whole restart waits for its old members' claims", "podgroup", klog.KObj(pg))
		return true, false, nil
	}
	r.unblock(key)
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
func (r *Restarter) startRestart(ctx context.Context, pg *schedulingv1beta1.PodGroup, active bool, cause disruption) (time.Time, error) {
	if active {
		err := r.cfg.Conditions.SetCondition(ctx, pg, metav1.Condition{Type: schedulingv1beta1.DisruptionTarget, Status: metav1.ConditionFalse,
			Reason: vocab.ReasonGangRestarted, Message: schedulerName + ": superseded by a new restart"})
		if err != nil {
			return time.Time{}, err
		}
	}
	msg := fmt.Sprintf("%s: %s: evicting the other members; the group is placed again when its controller recreates them",
		schedulerName, cause.why)
	boundary := time.Now().Truncate(time.Second)
	if err := r.cfg.Conditions.SetCondition(ctx, pg, metav1.Condition{Type: schedulingv1beta1.DisruptionTarget, Status: metav1.ConditionTrue,
		Reason: vocab.ReasonMemberDisrupted, Message: msg, LastTransitionTime: metav1.NewTime(boundary)}); err != nil {
		return time.Time{}, err
	}
	r.cfg.Report.Event(pg, v1.EventTypeWarning, vocab.EventGangRestart, "Restarting", msg)
	klog.FromContext(ctx).Info("Restarting a gang whole", "podgroup", klog.KObj(pg), "cause", cause.why)
	return boundary, nil
}

// evictOldMembers evicts the members bound before boundary that still run
// and returns how many old bound members are left (running or going).
// While the restart backs off (its last round was refused) it evicts
// nothing; a round with refusals starts or extends the backoff.
func (r *Restarter) evictOldMembers(ctx context.Context, pg *schedulingv1beta1.PodGroup, boundary time.Time) (int, error) {
	pods, err := r.cfg.Gangs.GroupPods(pg.Namespace, pg.Name)
	if err != nil {
		return 0, fmt.Errorf("list members: %w", err)
	}
	key := vocab.PodGroupKey(pg.Namespace, pg.Name)
	wait := r.backingOff(key, boundary)
	left, refused := 0, 0
	for _, p := range pods {
		if !podstate.Ours(p) || p.Spec.NodeName == "" || p.CreationTimestamp.After(boundary) || podstate.Terminated(p) {
			continue
		}
		if p.DeletionTimestamp != nil && r.cfg.NodeLost != nil && r.cfg.NodeLost(p) {
			continue // its node will never confirm it: gone
		}
		left++
		r.noteClaims(key, boundary, p)
		if p.DeletionTimestamp != nil || wait {
			continue
		}
		ok, err := r.evictMember(ctx, p)
		if err != nil {
			return left, err
		}
		if !ok {
			refused++
		}
	}
	if refused > 0 {
		r.blockedRound(ctx, pg, key, boundary, refused)
	}
	return left, nil
}

// blockedRound records an eviction round a PodDisruptionBudget refused:
// the backoff, and on the restart's first such round an event and the
// DisruptionTarget condition's message (same status: the boundary stays).
func (r *Restarter) blockedRound(ctx context.Context, pg *schedulingv1beta1.PodGroup, key string, boundary time.Time, refused int) {
	if !r.refusedRound(key, boundary) {
		return
	}
	msg := fmt.Sprintf("%s: restarting the group whole is blocked: a PodDisruptionBudget refused the eviction of %d old members; retried with a backoff of up to %s",
		schedulerName, refused, RestartBackoffCap)
	r.cfg.Report.Event(pg, v1.EventTypeWarning, vocab.EventRestartBlocked, "Restarting", msg)
	err := r.cfg.Conditions.SetCondition(ctx, pg, metav1.Condition{Type: schedulingv1beta1.DisruptionTarget, Status: metav1.ConditionTrue,
		Reason: vocab.ReasonMemberDisrupted, Message: msg})
	if err != nil {
		klog.FromContext(ctx).Error(err, "Saying a gang's restart is blocked", "podgroup", klog.KObj(pg))
	}
}

// evictMember evicts one member of a gang being restarted through the
// Eviction API (its PodDisruptionBudgets apply). It returns false when the
// eviction was refused (429: retried after the restart's backoff).
func (r *Restarter) evictMember(ctx context.Context, p *v1.Pod) (bool, error) {
	err := r.w.evict(ctx, p)
	switch {
	case errors.Is(err, gate.ErrAborted) || errors.Is(err, gate.ErrFenced):
		return false, err
	case err == nil:
		r.cfg.Report.Event(p, v1.EventTypeWarning, vocab.EventGangRestart, "Evicting", fmt.Sprintf("%s: another member of PodGroup %s was lost; the group restarts whole", schedulerName, podGroupName(p)))
		return true, nil
	case apierrors.IsNotFound(err) || apierrors.IsConflict(err):
		return true, nil
	case apierrors.IsTooManyRequests(err):
		klog.FromContext(ctx).V(2).Info("Eviction of a gang member refused; backing off", "pod", klog.KObj(p), "err", err.Error())
		return false, nil
	}
	return false, fmt.Errorf("evict %s/%s: %w", p.Namespace, p.Name, err)
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
