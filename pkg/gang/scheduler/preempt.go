package scheduler

import (
	"context"
	"errors"
	"fmt"
	"github.com/gpufabric/gpufabric/pkg/gang/commit"
	"github.com/gpufabric/gpufabric/pkg/gang/vocab"
	"slices"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/klog/v2"

	"github.com/gpufabric/gpufabric/pkg/gang/placement"
	"github.com/gpufabric/gpufabric/pkg/gang/placement/index"
	"github.com/gpufabric/gpufabric/pkg/gang/podstate"
	"github.com/gpufabric/gpufabric/pkg/gang/preemption"
	"github.com/gpufabric/gpufabric/pkg/gang/queue"
)

// settleGrace bounds how long a gang whose victims are all gone may still
// not fit before its nomination ends.
const settleGrace = 30 * time.Second

var errEvictionRefused = errors.New("eviction refused")

// afterRefusal runs when a gang did not fit: it advances the gang's
// preemption, or starts one. It returns a sentence for the refusal message
// ("" when there is nothing to say).
func (s *Scheduler) afterRefusal(ctx context.Context, a *attempt, g *placement.Gang, in index.SnapshotInput, members []*v1.Pod) (string, error) {
	if nm := s.nominations.get(a.key); nm != nil {
		msg, waiting, err := s.advanceNomination(ctx, a, nm)
		if err != nil || waiting {
			return msg, err
		}
	}
	var msgs []string
	if !s.cfg.DisablePreemption && mayPreempt(a.pg, members) {
		msg, planned, err := s.preempt(ctx, a, g, in)
		if err != nil || planned {
			return msg, err
		}
		msgs = append(msgs, msg)
	}
	msg, err := s.reserve(ctx, a, g, in)
	if err != nil {
		return "", err
	}
	msgs = slices.DeleteFunc(append(msgs, msg), func(m string) bool { return m == "" })
	return strings.Join(msgs, "\n"), nil
}

// preempt evaluates a preemption for the gang and, when a plan exists,
// records the nomination and evicts the victims.
func (s *Scheduler) preempt(ctx context.Context, a *attempt, g *placement.Gang, in index.SnapshotInput) (string, bool, error) {
	start := time.Now()
	vs, err := s.gatherUnits(a.priority)
	if err != nil || len(vs.units) == 0 {
		return "", false, err // nothing runs below it: nothing to say
	}
	plan, why, err := preemption.Evaluate(ctx, s.cfg.Placement, preemption.Request{
		Gang: g, Priority: a.priority, Input: in, Units: vs.units, Budgets: vs.budgets,
		Now: time.Now(), Budget: s.cfg.PreemptionBudget,
	})
	if err != nil {
		return "", false, fmt.Errorf("evaluate preemption: %w", err)
	}
	if plan == nil {
		s.cfg.Metrics.preemption(preemptNoPlan, time.Since(start).Seconds())
		return "preemption: " + why, false, nil
	}
	s.cfg.Metrics.preemption(preemptPlanned, time.Since(start).Seconds())
	klog.FromContext(ctx).V(2).Info("Preempting", "domain", plan.Domain, "key", plan.TopologyKey, "victims", len(plan.Victims),
		"pods", plan.Cost.Pods, "devices", plan.Cost.Devices, "evaluated", plan.Evaluated, "placements", plan.Placements, "duration", time.Since(start))
	nm, err := s.createNomination(ctx, s.nominationOf(a, plan, in))
	if err != nil {
		return "", false, err
	}
	summary := preemptionSummary(plan)
	s.report.Event(a.about(), v1.EventTypeNormal, vocab.EventPreempting, "Preempting", summary)
	s.nominatePods(ctx, plan.Decision)
	if _, _, err := s.advanceNomination(ctx, a, nm); err != nil {
		return "", true, err
	}
	return summary, true, nil
}

// nominationOf builds the record of a plan.
func (s *Scheduler) nominationOf(a *attempt, plan *preemption.Plan, in index.SnapshotInput) *nominationRecord {
	rec := &nominationRecord{
		Version: nominationVersion, Gang: a.key, UID: a.uid(), Priority: a.priority,
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
		var group types.UID
		if u.Group {
			group = s.podGroupUID(u.Key)
		}
		for _, p := range u.Pods {
			rec.Victims = append(rec.Victims, nominatedPod{Namespace: p.Namespace, Name: p.Name, UID: p.UID, Unit: u.Key})
		}
		for _, uid := range u.Claims {
			if c := claimsByUID[uid]; c != nil {
				nc := *c
				if group != "" && s.sharedClaimOf(c.Namespace, c.Name, group) {
					nc.Group = group
				}
				rec.Claims = append(rec.Claims, nc)
			}
		}
	}
	return rec
}

// preemptionSummary says what a plan evicts, for the event and condition.
func preemptionSummary(plan *preemption.Plan) string {
	names := make([]string, 0, len(plan.Victims))
	for _, u := range plan.Victims {
		names = append(names, strings.TrimPrefix(strings.TrimPrefix(u.Key, queue.PodGroupKeyPrefix), queue.PodKeyPrefix))
	}
	return fmt.Sprintf("preempting %d workloads of priority %d or lower (%d pods, %d devices) to place the gang in %s: %s",
		len(plan.Victims), plan.Cost.MaxPriority, plan.Cost.Pods, plan.Cost.Devices, commit.Where(plan.TopologyKey, plan.Domain), shortNames(names, 8))
}

func shortNames(names []string, n int) string {
	if len(names) <= n {
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(names[:n], ", "), len(names)-n)
}

// podGroupUID returns the UID of the PodGroup of a unit key, "" if gone.
func (s *Scheduler) podGroupUID(key string) types.UID {
	_, ns, name := queue.SplitKey(key)
	pg, err := s.podGroups.PodGroups(ns).Get(name)
	if err != nil {
		return ""
	}
	return pg.UID
}

// sharedClaimOf reports whether a claim is reserved for the PodGroup uid.
func (s *Scheduler) sharedClaimOf(ns, name string, group types.UID) bool {
	c, err := s.claims.ResourceClaims(ns).Get(name)
	return err == nil && commit.ReservedFor(c, group)
}

// endNominationOf ends the gang's nomination, if any (the gang was placed,
// or is gone). The shared claims of whole victim PodGroups are released
// first; while a victim group still has pods the record stays, holding no
// nodes, and sweepNominations finishes it.
func (s *Scheduler) endNominationOf(ctx context.Context, key string) error {
	nm := s.nominations.get(key)
	if nm == nil {
		return nil
	}
	live := s.liveVictims(nm.rec)
	if err := s.releaseGroupClaims(ctx, nm.rec, live); err != nil {
		return err
	}
	for _, c := range nm.rec.Claims {
		if c.Group != "" && s.groupRunning(nm.rec, c.Group, live) {
			nm.done.Store(true)
			return nil
		}
	}
	return s.endNomination(ctx, nm)
}

// sweepNominations ends, every interval, the nominations whose gang was
// placed while victim groups still had pods.
func (s *Scheduler) sweepNominations(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for _, nm := range s.nominations.all() {
			if !nm.done.Load() {
				continue
			}
			if err := s.endNominationOf(ctx, nm.rec.Gang); err != nil && ctx.Err() == nil {
				klog.FromContext(ctx).Error(err, "Finishing a nomination", "gang", nm.rec.Gang)
			}
		}
	}
}

// liveVictims returns the UIDs of the record's victim pods that still exist.
func (s *Scheduler) liveVictims(rec *nominationRecord) map[types.UID]bool {
	live := map[types.UID]bool{}
	for _, vp := range rec.Victims {
		if p, err := s.pods.Pods(vp.Namespace).Get(vp.Name); err == nil && p.UID == vp.UID && !podstate.Terminated(p) {
			live[p.UID] = true
		}
	}
	return live
}

// heldNodes are the nodes other gangs hold against attempt a: those of
// nominations of gangs of a's priority or higher, and of their
// reservations that a may not backfill (starve.go).
func (s *Scheduler) heldNodes(a *attempt) sets.Set[string] {
	held := sets.New[string]()
	for _, nm := range s.nominations.all() {
		if nm.rec.Gang != a.key && nm.rec.Priority >= a.priority && !nm.done.Load() {
			held.Insert(nm.rec.Nodes...)
		}
	}
	s.reservedNodes(a, held)
	return held
}

// gangDone ends what a gang held while it waited (placed, or gone).
func (s *Scheduler) gangDone(ctx context.Context, key string) error {
	s.cfg.Metrics.setReservations(s.starving.forget(key))
	return s.endNominationOf(ctx, key)
}

// victimPriority is a running pod's priority as a preemption victim.
func (s *Scheduler) victimPriority(p *v1.Pod) int32 {
	_, prio, _ := s.unitOf(p, map[string]*schedulingv1beta1.PodGroup{})
	return prio
}
