package replace

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"

	"github.com/gpufabric/gpufabric/pkg/gang/gate"
	"github.com/gpufabric/gpufabric/pkg/gang/report"
	"github.com/gpufabric/gpufabric/pkg/gang/vocab"
	"github.com/gpufabric/gpufabric/pkg/topology"
)

// Conditions sets one condition on a PodGroup (the loop's writer, past
// the gate); an unchanged condition is not rewritten.
type Conditions interface {
	SetCondition(ctx context.Context, pg *schedulingv1beta1.PodGroup, cond metav1.Condition) error
}

// Restarts starts the whole-gang restart of a PodGroup whatever its
// disruption mode (the evict room's Restarter carries it out); why says
// what was lost.
type Restarts interface {
	Restart(key, why string)
}

// Deps is what a Replacer needs; the loop fills it for each leadership
// term.
type Deps struct {
	Config
	Client     kubernetes.Interface
	Gate       *gate.Gate
	Report     *report.Reporter
	Metrics    *Metrics
	Conditions Conditions
	Restarts   Restarts
	// Deletions are the node informer's (when nodes were deleted).
	Deletions *Deletions
	// Tree, when set, is the fabric tree: a whole gang's previous NVLink
	// domain is written into its MembersLost condition by id and turned
	// back into its nodes after a scheduler restart.
	Tree func() (*topology.Tree, error)
	// Clock, when set, replaces the real clock (tests).
	Clock clock.PassiveClock
}

// Outcomes: the metric's outcome label values.
const (
	OutcomeInPlace   = "in_place"
	OutcomeRestarted = "restarted"
	OutcomeFailed    = "failed"
)

// Bounds of a gang's memory.
const (
	maxLost   = 8
	maxPrefer = 16
)

// phrases the condition's message carries, read back after a restart.
const (
	phraseRestarting = "restarting the whole gang"
)

// Replacer decides and carries out the replacement of placed gangs' lost
// members (the package's rules). One per leadership term; safe for
// concurrent use.
type Replacer struct {
	d     Deps
	clock clock.PassiveClock

	mu    sync.Mutex
	gangs map[string]*gangState
	// ended holds, per gang, its last episode that ended until its
	// condition's end is seen in the informers: a turn on the stale
	// condition (still True) must not start that episode again and count
	// it twice (the metric observed a whole restart once per member), nor
	// write over the end with the loop's plain condition (ReplacedInPlace
	// became AllMembersRunning). One entry per gang at most, dropped with
	// it.
	ended map[string]episodeEnd
}

// episodeEnd is how a gang's episode ended: the loss time it began with
// and the MembersLost condition its end wrote.
type episodeEnd struct {
	since time.Time
	cond  metav1.Condition
}

// gangState is a gang with a member lost to a trigger.
type gangState struct {
	since   time.Time
	trigger Trigger
	// lost describes the lost members (at most maxLost).
	lost []string
	// outcome is OutcomeRestarted once a restart was asked for.
	outcome string
	// prefer are nodes the gang ran on before a restart of a whole gang
	// (at most maxPrefer): the new gang goes back to their domain when it
	// fits.
	prefer []string
	// domain is the NVLink domain of prefer ("" when they span several),
	// written into the condition; after a restart prefer is its nodes.
	domain string
	// said: the NoReplacement event and the invalid annotations' event
	// were recorded.
	waitSaid, invalidSaid bool
}

// New returns the Replacer of d; d.Config must be validated
// (Config.WithDefaults).
func New(d Deps) *Replacer {
	r := &Replacer{d: d, clock: d.Clock, gangs: map[string]*gangState{}, ended: map[string]episodeEnd{}}
	if r.clock == nil {
		r.clock = clock.RealClock{}
	}
	if r.d.Deletions == nil {
		r.d.Deletions = &Deletions{}
	}
	return r
}

// Classify is Classify with the Replacer's grace, clock and deletions.
func (r *Replacer) Classify(p *v1.Pod, node *v1.Node) (*Loss, time.Duration) {
	var deleted time.Time
	if node == nil {
		deleted = r.d.Deletions.At(p.Spec.NodeName)
	}
	return Classify(r.d.NodeFailureGrace, p, node, deleted, r.clock.Now())
}

// Failed reports whether pg failed (policy Fail): nothing of it is placed
// again.
func Failed(pg *schedulingv1beta1.PodGroup) bool {
	return meta.IsStatusConditionTrue(pg.Status.Conditions, vocab.ConditionFailed)
}

// Handled reports whether loss is a failed member whose replacement
// already ran: it failed before the PodGroup's MembersLost condition last
// went False (replaced, or all members running again). Its controller
// keeps the failed pod (a Job keeps it for its logs); it no longer counts
// as lost, so it neither starts a loss again nor keeps the gang short.
func Handled(pg *schedulingv1beta1.PodGroup, loss *Loss) bool {
	c := meta.FindStatusCondition(pg.Status.Conditions, vocab.ConditionMembersLost)
	return loss.Trigger == PodFailed && c != nil && c.Status == metav1.ConditionFalse && loss.Since.Before(c.LastTransitionTime.Time)
}

// whole reports whether pg is disrupted only whole (disruptionMode All).
func whole(pg *schedulingv1beta1.PodGroup) bool {
	return pg.Spec.DisruptionMode != nil && pg.Spec.DisruptionMode.All != nil
}

// Turn takes one turn of a placed gang: the rules of docs/design/health.md.
func (r *Replacer) Turn(ctx context.Context, t Turn) (Outcome, error) {
	now := r.clock.Now()
	out := Outcome{Cond: t.Cond}
	old := meta.FindStatusCondition(t.PodGroup.Status.Conditions, vocab.ConditionMembersLost)
	st, echo := r.state(t.Key, old, t.Losses, now)
	if st == nil {
		switch {
		case echo != nil:
			out.Cond, out.Echo = *echo, true
		case old != nil && old.Status == metav1.ConditionFalse && old.Reason == vocab.ReasonReplacedInPlace && t.Cond.Status == metav1.ConditionFalse:
			out.Cond = *old // the last episode's end stays while all run
		}
		return out, nil
	}
	ch := r.d.Choose(t.PodGroup)
	if ch.Invalid != "" && !st.invalidSaid {
		st.invalidSaid = true
		r.d.Report.Event(t.PodGroup, v1.EventTypeWarning, vocab.EventInvalidAnnotation, "Replacing", ch.Invalid)
	}
	fresh := freshLosses(t.Losses)
	if cond, ok := r.wholeTurn(t, st, fresh); ok {
		out.Cond = cond
		return out, nil
	}
	if !t.whole() {
		if err := r.evictLost(ctx, t.PodGroup, fresh); err != nil {
			return out, err
		}
	}
	if !slices.ContainsFunc(fresh, notFailed) && len(t.Pending) == 0 && len(t.Running) >= t.Expected && len(t.Running) > 0 {
		out.Cond = r.replaced(t, st, now)
		r.end(t.Key, st, out.Cond)
		return out, nil
	}
	if st.outcome != "" && len(r.Prefer(t.Key)) > 0 && ch.Policy != vocab.PolicyRestart {
		return r.held(ctx, t, st, ch, now)
	}
	if st.outcome != "" {
		out.Cond = r.cond(t, st, phraseRestarting+": its old members go, then its new ones are placed together")
		return out, nil
	}
	return r.byPolicy(ctx, t, st, ch, now)
}

// wholeTurn restarts a gang disrupted only whole (itself, or a composite
// above it) on its first loss; ok: the turn ends with cond. A member
// deleted by a taint manager (no fresh loss) only notes the restart.
func (r *Replacer) wholeTurn(t Turn, st *gangState, fresh []Loss) (cond metav1.Condition, ok bool) {
	switch {
	case t.WholeAbove != "" && st.outcome == "" && len(fresh) == 0:
		// A taint manager's deletion: the evict room sees the leaf's own
		// mode only, the composite's restart is asked for here.
		r.restart(t, st, fmt.Sprintf("a member was deleted by a taint manager (%s); %s", st.trigger, aboveWhy(t)), false)
	case whole(t.PodGroup) && st.outcome == "" && len(fresh) == 0:
		r.restarting(t, st, true) // a taint manager's deletion: the evict room restarts it
	}
	if len(fresh) == 0 || !t.whole() || st.outcome != "" {
		return metav1.Condition{}, false
	}
	why := "the group is disrupted only whole, so it restarts whole at once, in its domain if it fits"
	if t.WholeAbove != "" {
		why = aboveWhy(t)
	}
	r.restart(t, st, fmt.Sprintf("member %s was lost (%s); %s", fresh[0].Why, fresh[0].Trigger, why), true)
	next := phraseRestarting + " now, in its domain if it fits"
	if t.Leaf {
		next = phraseRestarting + " now; its tree's search places it again"
	}
	return r.cond(t, st, next), true
}

// byPolicy waits for a replacement until the gang's timeout, then does
// what its policy says: keep waiting, restart whole, or fail.
func (r *Replacer) byPolicy(ctx context.Context, t Turn, st *gangState, ch Choice, now time.Time) (Outcome, error) {
	out := Outcome{Cond: t.Cond}
	deadline := st.since.Add(ch.Timeout)
	if now.Before(deadline) {
		out.Cond = r.cond(t, st, fmt.Sprintf("replacing in place in the gang's domain within %s, then policy %s", ch.Timeout, ch.Policy))
		out.RetryIn = deadline.Sub(now)
		return out, nil
	}
	why := fmt.Sprintf("no replacement was placed within %s of the loss (%s at %s)", ch.Timeout, st.trigger, st.since.UTC().Format(time.RFC3339))
	switch ch.Policy {
	case vocab.PolicyWait:
		out.Cond = r.cond(t, st, why+"; policy Wait: it keeps waiting for room in the gang's domain: "+waitingWhy(t.Pending))
		out.Cond.Reason = vocab.ReasonNoReplacement
		if !st.waitSaid {
			st.waitSaid = true
			r.d.Report.Event(t.PodGroup, v1.EventTypeWarning, vocab.EventNoReplacement, "Replacing", out.Cond.Message)
		}
	case vocab.PolicyRestart:
		r.restart(t, st, fmt.Sprintf("%s; policy Restart: the group restarts whole, wherever it fits best now", why), false)
		out.Cond = r.cond(t, st, phraseRestarting+" (policy Restart): "+why)
	default:
		out.Stop = true
		return out, r.fail(ctx, t, st, why)
	}
	return out, nil
}

// state returns the gang's state, started or recovered (from the
// MembersLost condition) as needed, or nil when no member of it is lost
// to a trigger; then echo, when set, is the condition an episode that
// ended wrote, which old (still True) does not show yet.
func (r *Replacer) state(key string, old *metav1.Condition, losses []Loss, now time.Time) (st *gangState, echo *metav1.Condition) {
	r.mu.Lock()
	defer r.mu.Unlock()
	st = r.gangs[key]
	if old == nil || old.Status != metav1.ConditionTrue {
		delete(r.ended, key) // the episode's end is written
	} else if end, ok := r.ended[key]; ok && end.since.Truncate(time.Second).Equal(old.LastTransitionTime.Truncate(time.Second)) {
		old = nil // the episode that ended, not written yet: no new one
		echo = &end.cond
	}
	if st == nil && old != nil && old.Status == metav1.ConditionTrue && (old.Reason == vocab.ReasonReplacingInPlace || old.Reason == vocab.ReasonNoReplacement) {
		st = &gangState{since: old.LastTransitionTime.Time, trigger: triggerIn(old.Message), domain: domainIn(old.Message)}
		st.waitSaid = old.Reason == vocab.ReasonNoReplacement
		if strings.Contains(old.Message, phraseRestarting) {
			st.outcome = OutcomeRestarted
		}
		r.gangs[key] = st
	}
	if len(losses) == 0 {
		return st, echo
	}
	if st == nil {
		st = &gangState{}
		r.gangs[key] = st
	}
	for _, l := range losses {
		since := l.Since
		if since.IsZero() {
			since = now // a node deleted before this term, first seen
			if old != nil && old.Status == metav1.ConditionTrue {
				since = old.LastTransitionTime.Time
			}
		}
		if st.since.IsZero() || since.Before(st.since) {
			st.since, st.trigger = since, l.Trigger
		}
		if len(st.lost) < maxLost && !slices.Contains(st.lost, l.Why) {
			st.lost = append(st.lost, l.Why)
		}
	}
	return st, nil
}

// triggerIn finds the trigger a condition's message names.
func triggerIn(msg string) Trigger {
	for _, t := range Triggers {
		if strings.Contains(msg, "("+string(t)+")") {
			return t
		}
	}
	return NodeDeleted
}

// cond is the MembersLost condition of a gang being replaced: True,
// ReplacingInPlace since the loss, the loop's counts, what was lost and
// what happens next.
func (r *Replacer) cond(t Turn, st *gangState, next string) metav1.Condition {
	return metav1.Condition{Type: vocab.ConditionMembersLost, Status: metav1.ConditionTrue, Reason: vocab.ReasonReplacingInPlace,
		LastTransitionTime: metav1.NewTime(st.since),
		Message: fmt.Sprintf("%s; lost to a trigger (%s) at %s, lost: %s%s; %s", t.Cond.Message, st.trigger, st.since.UTC().Format(time.RFC3339),
			r.lostOf(st), domainPhrase(st.domain), next)}
}

// lostOf describes a gang's lost members (Disrupted adds to them from the
// informers' goroutine).
func (r *Replacer) lostOf(st *gangState) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return strings.Join(st.lost, ", ")
}

// replaced is the condition of a gang's replacement that ended: its
// members run again.
func (r *Replacer) replaced(t Turn, st *gangState, now time.Time) metav1.Condition {
	outcome := st.outcome
	if outcome == "" {
		outcome = OutcomeInPlace
	}
	took := now.Sub(st.since)
	r.d.Metrics.observe(st.trigger, outcome, took.Seconds())
	if outcome == OutcomeRestarted {
		return t.Cond
	}
	msg := fmt.Sprintf("all %d members run: the members lost (%s) were replaced in place in %s", len(t.Running), st.trigger, took.Round(time.Second))
	r.d.Report.Event(t.PodGroup, v1.EventTypeNormal, vocab.EventReplacedInPlace, "Replacing", msg)
	return metav1.Condition{Type: vocab.ConditionMembersLost, Status: metav1.ConditionFalse, Reason: vocab.ReasonReplacedInPlace, Message: msg}
}

// restart asks for the gang's whole restart (or its composite's: every
// leaf under it); prefer: it goes back to the domain of its running
// members when it fits (a tree's leaf: its tree's search pins it there
// first).
func (r *Replacer) restart(t Turn, st *gangState, why string, prefer bool) {
	r.restarting(t, st, prefer)
	r.d.Restarts.Restart(t.restartKey(), why)
}

// restarting marks the gang's restart; prefer: remember the nodes of its
// running members and their NVLink domain.
func (r *Replacer) restarting(t Turn, st *gangState, prefer bool) {
	var nodes []string
	for _, p := range t.Running {
		if prefer && len(nodes) < maxPrefer && !slices.Contains(nodes, p.Spec.NodeName) {
			nodes = append(nodes, p.Spec.NodeName)
		}
	}
	domain := r.domainOf(nodes)
	r.mu.Lock()
	defer r.mu.Unlock()
	st.outcome = OutcomeRestarted
	if prefer {
		st.prefer, st.domain = nodes, domain
	}
}

// reasonDeviceTaintManager is kube-controller-manager's DisruptionTarget
// reason for a pod deleted for a device NoExecute taint.
const reasonDeviceTaintManager = "DeletionByDeviceTaintManager"

// Disrupted notes a member of the gang key that a taint manager deletes
// (the evict room's Disruptions saw it): a device_taint loss (node_tainted
// for a node taint) from now, so that its replacement is bounded and
// measured like the others.
func (r *Replacer) Disrupted(key string, p *v1.Pod) {
	trigger := NodeTainted
	for _, c := range p.Status.Conditions {
		if c.Type == v1.DisruptionTarget && c.Reason == reasonDeviceTaintManager {
			trigger = DeviceTaint
		}
	}
	why := fmt.Sprintf("%s on node %s, deleted by a taint manager", p.Name, p.Spec.NodeName)
	r.mu.Lock()
	defer r.mu.Unlock()
	st := r.gangs[key]
	if st == nil {
		st = &gangState{since: r.clock.Now(), trigger: trigger}
		r.gangs[key] = st
	}
	if len(st.lost) < maxLost && !slices.Contains(st.lost, why) {
		st.lost = append(st.lost, why)
	}
}

// held takes the turn of a whole gang restarting in its previous domain
// under policy Wait or Fail (Stays keeps it there): until the bound from
// the loss it waits; past it, Wait keeps waiting (reason NoReplacement,
// one event) and Fail fails the PodGroup.
func (r *Replacer) held(ctx context.Context, t Turn, st *gangState, ch Choice, now time.Time) (Outcome, error) {
	out := Outcome{Cond: t.Cond}
	deadline := st.since.Add(ch.Timeout)
	if now.Before(deadline) {
		out.Cond = r.cond(t, st, fmt.Sprintf("%s: its new members wait for room in its previous domain within %s, then policy %s", phraseRestarting, ch.Timeout, ch.Policy))
		out.RetryIn = deadline.Sub(now)
		return out, nil
	}
	why := fmt.Sprintf("the restarted gang was not placed in its previous domain within %s of the loss (%s at %s)", ch.Timeout, st.trigger, st.since.UTC().Format(time.RFC3339))
	if ch.Policy == vocab.PolicyWait {
		out.Cond = r.cond(t, st, phraseRestarting+"; "+why+"; policy Wait: it keeps waiting for room in its previous domain: "+waitingWhy(t.Pending))
		out.Cond.Reason = vocab.ReasonNoReplacement
		if !st.waitSaid {
			st.waitSaid = true
			r.d.Report.Event(t.PodGroup, v1.EventTypeWarning, vocab.EventNoReplacement, "Replacing", out.Cond.Message)
		}
		return out, nil
	}
	out.Stop = true
	return out, r.fail(ctx, t, st, why)
}

// Stays says why the restarting whole gang of pg may not leave its
// previous domain (Prefer) when that has no room: its policy Wait or Fail
// keeps it there (Fail until its bound, when its Turn fails it); "" when
// it may go wherever it fits best now (policy Restart, or no previous
// domain known).
func (r *Replacer) Stays(key string, pg *schedulingv1beta1.PodGroup) string {
	r.Prefer(key) // its previous domain's nodes, after a restart
	r.mu.Lock()
	st := r.gangs[key]
	known := st != nil && st.outcome == OutcomeRestarted && len(st.prefer) > 0
	var since time.Time
	if known {
		since = st.since
	}
	r.mu.Unlock()
	if !known {
		return ""
	}
	switch ch := r.d.Choose(pg); ch.Policy {
	case vocab.PolicyWait:
		return "policy Wait: the restarted gang waits for room in its previous domain"
	case vocab.PolicyFail:
		return fmt.Sprintf("policy Fail: the restarted gang waits for room in its previous domain until %s (%s from the loss), then fails",
			since.Add(ch.Timeout).UTC().Format(time.RFC3339), ch.Timeout)
	}
	return ""
}

// end ends a gang's episode (replaced, restarted or failed) with the
// condition cond: its state goes, its loss time and cond are kept in
// ended until the end is written.
func (r *Replacer) end(key string, st *gangState, cond metav1.Condition) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.gangs, key)
	r.ended[key] = episodeEnd{since: st.since, cond: cond}
}

// Forget drops a gang's state (its PodGroup went).
func (r *Replacer) Forget(key string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.gangs, key)
	delete(r.ended, key)
}
