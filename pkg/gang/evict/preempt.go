package evict

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/gpufabric/gpufabric/pkg/gang/commit"
	"github.com/gpufabric/gpufabric/pkg/gang/placement"
	"github.com/gpufabric/gpufabric/pkg/gang/placement/index"
	"github.com/gpufabric/gpufabric/pkg/gang/preemption"
	"github.com/gpufabric/gpufabric/pkg/gang/vocab"
)

// settleGrace bounds how long a gang whose victims are all gone may still
// not fit before its nomination ends.
const settleGrace = 30 * time.Second

// sweepInterval is how often Run ends the nominations of placed gangs.
const sweepInterval = 2 * time.Second

var errEvictionRefused = errors.New("eviction refused")

// Evictor carries preemptions out and holds room for gangs: the
// nominations (gangs preempting, their victims and the nodes held for
// them) and the reservations of starving gangs. One per leadership term;
// safe for concurrent use.
type Evictor struct {
	cfg         Config
	w           *writer
	victims     *victims
	nominations *nominationSet
	// starving: how long gangs wait, and the domains held for those past
	// Config.StarvationBound.
	starving *starvation
}

// clock is Config.Clock, or the real clock.
func (e *Evictor) clock() clock.PassiveClock {
	if e.cfg.Clock != nil {
		return e.cfg.Clock
	}
	return clock.RealClock{}
}

// New returns the evict room for cfg.
func New(cfg Config) *Evictor {
	e := &Evictor{cfg: cfg, nominations: newNominationSet()}
	e.w = &writer{cfg: &e.cfg}
	e.victims = &victims{cfg: &e.cfg}
	e.starving = newStarvation(&e.cfg)
	return e
}

// AfterRefusal runs when a gang did not fit: it advances the gang's
// preemption, or starts one, and else reserves a domain for a starving
// gang. in is what the gang was placed on (the listers less the nodes held
// against it). It returns a sentence for the refusal message ("" when
// there is nothing to say).
func (e *Evictor) AfterRefusal(ctx context.Context, a *Attempt, g *placement.Gang, in index.SnapshotInput) (string, error) {
	return e.afterRefusal(ctx, a, preemption.Request{Gang: g}, in)
}

// AfterTreeRefusal is AfterRefusal for a CompositePodGroup tree that did
// not fit (a.Root): the plan places the tree with its own placer (the
// tree search) in the domains of its root's level, and the victims are
// evicted as for a gang. A starving tree reserves the domain of its
// root's level closest to fitting it, as a gang does.
func (e *Evictor) AfterTreeRefusal(ctx context.Context, a *Attempt, t *preemption.Tree, in index.SnapshotInput) (string, error) {
	return e.afterRefusal(ctx, a, preemption.Request{Tree: t}, in)
}

// afterRefusal is AfterRefusal for req's preemptor (its Gang or Tree).
func (e *Evictor) afterRefusal(ctx context.Context, a *Attempt, req preemption.Request, in index.SnapshotInput) (string, error) {
	if nm := e.nominations.get(a.Key); nm != nil {
		msg, waiting, err := e.advanceNomination(ctx, a, nm)
		if err != nil || waiting {
			return msg, err
		}
	}
	var msgs []string
	if a.Capped != "" {
		msgs = append(msgs, a.Capped)
	}
	switch {
	case e.cfg.DisablePreemption:
	case a.NoPreemption != "":
		msgs = append(msgs, "preemption not allowed: "+a.NoPreemption)
	case preemption.MayPreempt(a.PodGroup, a.Members):
		msg, planned, err := e.preempt(ctx, a, req, in)
		if err != nil || planned {
			return msg, err
		}
		msgs = append(msgs, msg)
	}
	msg, err := e.starving.reserve(ctx, a, req, in)
	if err != nil {
		return "", err
	}
	msgs = append(msgs, msg)
	msgs = slices.DeleteFunc(msgs, func(m string) bool { return m == "" })
	return strings.Join(msgs, "\n"), nil
}

// preempt evaluates a preemption for req's preemptor and, when a plan
// exists, records the nomination and evicts the victims.
//
// The scan of what may be evicted (pods, claims, budgets) and the
// evaluation share one budget, Config.PreemptionBudget: a scan that uses
// it up ends the preemption without a plan, and says so.
func (e *Evictor) preempt(ctx context.Context, a *Attempt, req preemption.Request, in index.SnapshotInput) (string, bool, error) {
	start := time.Now()
	b := &budget{clock: e.clock(), deadline: e.clock().Now().Add(e.cfg.PreemptionBudget)}
	vs, err := e.victims.gather(a.Priority, b)
	if errors.Is(err, errOutOfBudget) {
		e.cfg.Metrics.preemption(preemptNoPlan, time.Since(start).Seconds())
		klog.FromContext(ctx).V(2).Info("Preemption out of budget", "err", err, "budget", e.cfg.PreemptionBudget)
		return fmt.Sprintf("preemption: its budget of %s ran out before the victims were chosen", e.cfg.PreemptionBudget), false, nil
	}
	if err != nil || len(vs.units) == 0 {
		return "", false, err // nothing runs below it: nothing to say
	}
	req.Priority, req.Input, req.Units, req.Budgets = a.Priority, in, vs.units, vs.budgets
	req.Now, req.Budget = time.Now(), b.left()
	plan, why, err := preemption.Evaluate(ctx, e.cfg.Placement, req)
	if err != nil {
		return "", false, fmt.Errorf("evaluate preemption: %w", err)
	}
	if plan == nil {
		e.cfg.Metrics.preemption(preemptNoPlan, time.Since(start).Seconds())
		return "preemption: " + why, false, nil
	}
	e.cfg.Metrics.preemption(preemptPlanned, time.Since(start).Seconds())
	klog.FromContext(ctx).V(2).Info("Preempting", "domain", plan.Domain, "key", plan.TopologyKey, "victims", len(plan.Victims),
		"pods", plan.Cost.Pods, "devices", plan.Cost.Devices, "evaluated", plan.Evaluated, "placements", plan.Placements, "duration", time.Since(start))
	nm, err := e.createNomination(ctx, e.nominationOf(a, plan, in))
	if err != nil {
		return "", false, err
	}
	what := "gang"
	if a.Root != nil {
		what = "tree"
	}
	summary := preemptionSummary(a.namespace(), what, plan)
	e.cfg.Report.Event(a.about(), v1.EventTypeNormal, vocab.EventPreempting, "Preempting", summary)
	e.nominatePods(ctx, plan.Decision)
	if _, _, err := e.advanceNomination(ctx, a, nm); err != nil {
		return "", true, err
	}
	return summary, true, nil
}

// nominationOf builds the record of a plan.
func (e *Evictor) nominationOf(a *Attempt, plan *preemption.Plan, in index.SnapshotInput) *nominationRecord {
	rec := &nominationRecord{
		Version: nominationVersion, Gang: a.Key, UID: a.uid(), Priority: a.Priority,
		TopologyKey: plan.TopologyKey, Domain: plan.Domain, Created: metav1Now(),
	}
	nodes := sets.New[string]()
	for _, p := range plan.Decision.Pods {
		nodes.Insert(p.Node)
	}
	rec.Nodes = sets.List(nodes)
	claimsByUID := map[types.UID]*nominatedClaim{}
	for _, c := range in.ResourceClaims {
		claimsByUID[c.UID] = &nominatedClaim{Namespace: c.Namespace, Name: c.Name, UID: c.UID}
	}
	for _, u := range plan.Victims {
		for _, p := range u.Pods {
			rec.Victims = append(rec.Victims, nominatedPod{Namespace: p.Namespace, Name: p.Name, UID: p.UID, Unit: u.Key})
		}
		for _, uid := range u.Claims {
			if c := claimsByUID[uid]; c != nil {
				nc := *c
				if u.Group { // a whole group's: its PodGroups' shared claims are released by the scheduler
					nc.Group = e.victims.sharedClaimGroup(c.Namespace, c.Name)
				}
				rec.Claims = append(rec.Claims, nc)
			}
		}
	}
	return rec
}

// preemptionSummary says what a plan evicts, for the event and condition
// of a gang (what: "gang" or "tree") of namespace ns: the victims of ns by
// name, the others counted.
func preemptionSummary(ns, what string, plan *preemption.Plan) string {
	names := make([]string, 0, len(plan.Victims))
	others := 0
	for _, u := range plan.Victims {
		_, vns, name := vocab.SplitKey(u.Key)
		if vns != ns {
			others++
			continue
		}
		names = append(names, ns+"/"+name)
	}
	if others > 0 {
		names = append(names, fmt.Sprintf("%d of other namespaces", others))
	}
	return fmt.Sprintf("preempting %d workloads of priority %d or lower (%d pods, %d devices) to place the %s in %s: %s",
		len(plan.Victims), plan.Cost.MaxPriority, plan.Cost.Pods, plan.Cost.Devices, what, commit.Where(plan.TopologyKey, plan.Domain), shortNames(names, 8))
}

func shortNames(names []string, n int) string {
	if len(names) <= n {
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(names[:n], ", "), len(names)-n)
}

// advanceNomination moves a preemption on: it evicts the victims still
// running (all of them right after the plan; after a restart, those the
// last term did not get to), releases the shared claims of whole victim
// PodGroups once their pods are gone, and ends the nomination when it
// expired or the gang changed. It returns waiting=false when the
// nomination ended (the gang may preempt again), with a sentence for the
// refusal message.
//
// Only the pods the record names are ever evicted, and only while they
// still run with the UID recorded and a priority below the preemptor's:
// a restart never evicts twice, nor anything the record does not name.
func (e *Evictor) advanceNomination(ctx context.Context, a *Attempt, nm *nomination) (string, bool, error) {
	rec := nm.rec
	if rec.UID != a.uid() || rec.Priority != a.Priority {
		return "", false, e.endNomination(ctx, nm)
	}
	live, left, err := e.evictNominated(ctx, a, nm)
	if errors.Is(err, errEvictionRefused) {
		e.cfg.Metrics.preemption(preemptRefused, -1)
		e.cfg.Report.Event(a.about(), v1.EventTypeWarning, vocab.EventPreemptionBlocked, "Preempting", err.Error())
		e.unnominatePods(ctx, a)
		return "", false, e.endNomination(ctx, nm)
	}
	if err != nil {
		return "", true, err
	}
	if err := e.releaseGroupClaims(ctx, rec, live); err != nil {
		return "", true, err
	}
	claimsLeft := e.victimClaimsLeft(rec)
	age := time.Since(rec.Created.Time)
	if left > 0 || claimsLeft > 0 {
		nm.settled = time.Time{}
		if age > e.cfg.NominationTimeout {
			return e.expire(ctx, a, nm, fmt.Sprintf("%d victim pods still running after %s", left, age.Round(time.Second)))
		}
		return fmt.Sprintf("preempting in %s: waiting for %d of %d victim pods to stop and %d of their claims to be freed",
			commit.Where(rec.TopologyKey, rec.Domain), left, len(rec.Victims), claimsLeft), true, nil
	}
	if nm.settled.IsZero() {
		nm.settled = time.Now()
	}
	if time.Since(nm.settled) > min(settleGrace, e.cfg.NominationTimeout) {
		return e.expire(ctx, a, nm, "the victims are gone but the gang still does not fit")
	}
	return fmt.Sprintf("preempting in %s: the victims are gone, waiting for their devices to show free", commit.Where(rec.TopologyKey, rec.Domain)), true, nil
}

// expire ends a nomination that did not lead to a placement in time.
func (e *Evictor) expire(ctx context.Context, a *Attempt, nm *nomination, why string) (string, bool, error) {
	e.cfg.Metrics.preemption(preemptExpired, -1)
	klog.FromContext(ctx).V(2).Info("Nomination expired", "why", why)
	e.unnominatePods(ctx, a)
	return "", false, e.endNomination(ctx, nm)
}

// Nominated reports whether the gang with key is preempting (its victims
// are going).
func (e *Evictor) Nominated(key string) bool { return e.nominations.get(key) != nil }

// Held returns the nodes other gangs hold against attempt a: those of
// nominations of gangs of a's priority or higher, and of their
// reservations that a may not backfill (starve.go).
func (e *Evictor) Held(a *Attempt) sets.Set[string] {
	held := sets.New[string]()
	for _, nm := range e.nominations.all() {
		if nm.rec.Gang != a.Key && nm.rec.Priority >= a.Priority && !nm.done.Load() {
			held.Insert(nm.rec.Nodes...)
		}
	}
	e.starving.reservedNodes(a, held)
	return held
}

// HeldNote says, for attempt a's refusal, which nodes other gangs hold
// against it (Held) and for what, naming neither those gangs nor, for
// another namespace's, their namespace: "" when none is held.
func (e *Evictor) HeldNote(a *Attempt) string {
	_, ns, _ := vocab.SplitKey(a.Key)
	whose := func(key string) string {
		if _, other, _ := vocab.SplitKey(key); other == ns {
			return "of this namespace"
		}
		return "of another namespace"
	}
	byWhy := map[string]sets.Set[string]{}
	add := func(why string, nodes ...string) {
		if byWhy[why] == nil {
			byWhy[why] = sets.New[string]()
		}
		byWhy[why].Insert(nodes...)
	}
	for _, nm := range e.nominations.all() {
		if nm.rec.Gang != a.Key && nm.rec.Priority >= a.Priority && !nm.done.Load() {
			add("held for a preempting gang "+whose(nm.rec.Gang), nm.rec.Nodes...)
		}
	}
	for _, r := range e.starving.against(a) {
		add("reserved for a starving gang "+whose(r.key), r.nodes.UnsortedList()...)
	}
	if len(byWhy) == 0 {
		return ""
	}
	all := sets.New[string]()
	parts := make([]string, 0, len(byWhy))
	for _, why := range sets.List(sets.KeySet(byWhy)) {
		all = all.Union(byWhy[why])
		parts = append(parts, fmt.Sprintf("%d %s", byWhy[why].Len(), why))
	}
	return fmt.Sprintf("%d nodes were not considered, other gangs hold them: %s (what follows counts only the other nodes)",
		all.Len(), strings.Join(parts, ", "))
}

// GangDone ends what a gang held while it waited (it was placed, or is
// gone): its reservation and its nomination.
func (e *Evictor) GangDone(ctx context.Context, key string) error {
	e.cfg.Metrics.setReservations(e.starving.forget(key))
	return e.endNominationOf(ctx, key)
}

// endNominationOf ends the gang's nomination, if any (the gang was placed,
// or is gone). The shared claims of whole victim PodGroups are released
// first; while a victim group still has pods the record stays, holding no
// nodes, and Run finishes it.
func (e *Evictor) endNominationOf(ctx context.Context, key string) error {
	nm := e.nominations.get(key)
	if nm == nil {
		return nil
	}
	live := e.victims.live(nm.rec)
	if err := e.releaseGroupClaims(ctx, nm.rec, live); err != nil {
		return err
	}
	running := e.victims.groupsRunning(nm.rec, live)
	for _, c := range nm.rec.Claims {
		if c.Group != "" && running[c.Group] {
			nm.done.Store(true)
			return nil
		}
	}
	return e.endNomination(ctx, nm)
}

// Run ends, every sweepInterval until ctx is done, the nominations whose
// gang was placed while victim groups still had pods. The loop starts it
// once the records are loaded.
func (e *Evictor) Run(ctx context.Context) {
	t := time.NewTicker(sweepInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for _, nm := range e.nominations.all() {
			if !nm.done.Load() {
				continue
			}
			if err := e.endNominationOf(ctx, nm.rec.Gang); err != nil && ctx.Err() == nil {
				klog.FromContext(ctx).Error(err, "Finishing a nomination", "gang", nm.rec.Gang)
			}
		}
	}
}
