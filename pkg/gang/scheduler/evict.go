package scheduler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/gpufabric/gpufabric/pkg/gang/commit"
	"github.com/gpufabric/gpufabric/pkg/gang/gate"
	"github.com/gpufabric/gpufabric/pkg/gang/vocab"
	"time"

	v1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	resourceapi "k8s.io/api/resource/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/gpufabric/gpufabric/pkg/gang/placement"
	"github.com/gpufabric/gpufabric/pkg/gang/podstate"
	"github.com/gpufabric/gpufabric/pkg/gang/queue"
)

func metav1Now() metav1.Time { return metav1.NewTime(time.Now().Truncate(time.Second)) }

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
func (s *Scheduler) advanceNomination(ctx context.Context, a *attempt, nm *nomination) (string, bool, error) {
	rec := nm.rec
	if rec.UID != a.uid() || rec.Priority != a.priority {
		return "", false, s.endNomination(ctx, nm)
	}
	live, left, err := s.evictNominated(ctx, a, nm)
	if errors.Is(err, errEvictionRefused) {
		s.cfg.Metrics.preemption(preemptRefused, -1)
		s.report.Event(a.about(), v1.EventTypeWarning, vocab.EventPreemptionBlocked, "Preempting", err.Error())
		s.unnominatePods(ctx, a)
		return "", false, s.endNomination(ctx, nm)
	}
	if err != nil {
		return "", true, err
	}
	if err := s.releaseGroupClaims(ctx, rec, live); err != nil {
		return "", true, err
	}
	claimsLeft := s.victimClaimsLeft(rec)
	age := time.Since(rec.Created.Time)
	if left > 0 || claimsLeft > 0 {
		nm.settled = time.Time{}
		if age > s.cfg.NominationTimeout {
			return s.expire(ctx, a, nm, fmt.Sprintf("%d victim pods still running after %s", left, age.Round(time.Second)))
		}
		return fmt.Sprintf("preempting in %s: waiting for %d of %d victim pods to stop and %d of their claims to be freed",
			commit.Where(rec.TopologyKey, rec.Domain), left, len(rec.Victims), claimsLeft), true, nil
	}
	if nm.settled.IsZero() {
		nm.settled = time.Now()
	}
	if time.Since(nm.settled) > min(settleGrace, s.cfg.NominationTimeout) {
		return s.expire(ctx, a, nm, "the victims are gone but the gang still does not fit")
	}
	return fmt.Sprintf("preempting in %s: the victims are gone, waiting for their devices to show free", commit.Where(rec.TopologyKey, rec.Domain)), true, nil
}

// expire ends a nomination that did not lead to a placement in time.
func (s *Scheduler) expire(ctx context.Context, a *attempt, nm *nomination, why string) (string, bool, error) {
	s.cfg.Metrics.preemption(preemptExpired, -1)
	klog.FromContext(ctx).V(2).Info("Nomination expired", "why", why)
	s.unnominatePods(ctx, a)
	return "", false, s.endNomination(ctx, nm)
}

// evictNominated evicts the record's victims that still run, covered by a
// PodDisruptionBudget first. It returns which victim pods are still there
// (by UID) and how many.
func (s *Scheduler) evictNominated(ctx context.Context, a *attempt, nm *nomination) (map[types.UID]bool, int, error) {
	live := map[types.UID]bool{}
	var first, rest []*v1.Pod
	for _, vp := range nm.rec.Victims {
		p, err := s.pods.Pods(vp.Namespace).Get(vp.Name)
		if err != nil || p.UID != vp.UID || podstate.Terminated(p) {
			continue
		}
		live[p.UID] = true
		if p.DeletionTimestamp != nil || p.Spec.NodeName == "" || s.victimPriority(p) >= nm.rec.Priority {
			continue // going already, or no longer a victim: never evicted
		}
		if covered, _ := s.coveredByBudget(p); covered {
			first = append(first, p)
		} else {
			rest = append(rest, p)
		}
	}
	marked := map[string]bool{}
	for _, batch := range [][]*v1.Pod{first, rest} {
		for _, p := range batch {
			if unit := s.unitKeyOf(nm.rec, p.UID); unit != "" && !marked[unit] {
				marked[unit] = true
				s.markVictimUnit(ctx, a, nm, unit)
			}
		}
		err := commit.Parallel(ctx, s.cfg.CommitParallelism, len(batch), func(ctx context.Context, i int) error {
			return s.evictVictim(ctx, a, nm, batch[i])
		})
		if err != nil {
			return live, len(live), err
		}
	}
	return live, len(live), nil
}

func (s *Scheduler) unitKeyOf(rec *nominationRecord, uid types.UID) string {
	for _, v := range rec.Victims {
		if v.UID == uid {
			return v.Unit
		}
	}
	return ""
}

// coveredByBudget reports whether a PodDisruptionBudget selects the pod.
func (s *Scheduler) coveredByBudget(p *v1.Pod) (bool, error) {
	pdbs, err := s.pdbs.PodDisruptionBudgets(p.Namespace).List(labels.Everything())
	if err != nil {
		return false, err
	}
	for _, pdb := range pdbs {
		if sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector); err == nil && sel.Matches(labels.Set(p.Labels)) {
			return true, nil
		}
	}
	return false, nil
}

// markVictimUnit reports a victim unit: the event once per unit, and for a
// whole PodGroup its DisruptionTarget condition.
func (s *Scheduler) markVictimUnit(ctx context.Context, a *attempt, nm *nomination, unit string) {
	isGroup, ns, name := queue.SplitKey(unit)
	s.cfg.Metrics.victim(isGroup)
	if !isGroup {
		return
	}
	pg, err := s.podGroups.PodGroups(ns).Get(name)
	if err != nil {
		return
	}
	msg := preemptedMessage(a, nm)
	s.report.Event(pg, v1.EventTypeWarning, vocab.EventPreempted, "Preempting", msg)
	err = s.conditions.SetCondition(ctx, pg, metav1.Condition{
		Type: schedulingv1beta1.DisruptionTarget, Status: metav1.ConditionTrue, Reason: vocab.ReasonPreemptionByScheduler, Message: msg,
	})
	if err != nil && !errors.Is(err, gate.ErrFenced) && !errors.Is(err, gate.ErrAborted) {
		klog.FromContext(ctx).Error(err, "Setting DisruptionTarget on a preempted PodGroup", "podgroup", klog.KObj(pg))
	}
}

func preemptedMessage(a *attempt, nm *nomination) string {
	return fmt.Sprintf("%s: preempted by %s (priority %d) to make room in %s",
		schedulerName, a.describe(), nm.rec.Priority, commit.Where(nm.rec.TopologyKey, nm.rec.Domain))
}

// evictVictim evicts one victim pod through the Eviction API (its
// PodDisruptionBudgets apply) with its own grace period; then, for a pod
// this scheduler schedules, it names the preemptor in the pod's
// DisruptionTarget condition (the Eviction API sets a generic one).
func (s *Scheduler) evictVictim(ctx context.Context, a *attempt, nm *nomination, p *v1.Pod) error {
	err := s.evict(ctx, p)
	switch {
	case errors.Is(err, gate.ErrAborted) || errors.Is(err, gate.ErrFenced):
		return err
	case apierrors.IsNotFound(err) || apierrors.IsConflict(err):
		return nil
	case apierrors.IsTooManyRequests(err):
		return fmt.Errorf("%w: evicting %s/%s for %s: %v", errEvictionRefused, p.Namespace, p.Name, a.describe(), err)
	case err != nil:
		return fmt.Errorf("evict %s/%s: %w", p.Namespace, p.Name, err)
	}
	msg := preemptedMessage(a, nm)
	s.report.Event(p, v1.EventTypeWarning, vocab.EventPreempted, "Preempting", msg)
	if podstate.Ours(p) {
		s.patchPodStatus(ctx, p, map[string]any{"conditions": []v1.PodCondition{{
			Type: v1.DisruptionTarget, Status: v1.ConditionTrue, Reason: vocab.ReasonPreemptionByScheduler,
			Message: msg, LastTransitionTime: metav1.Now(),
		}}})
	}
	return nil
}

// evict asks the Eviction API to evict p, the pod with p's UID only (the
// commit hook's gate.StepEvict first). The API's error is returned as it is.
func (s *Scheduler) evict(ctx context.Context, p *v1.Pod) error {
	if err := s.gate.Check(gate.StepEvict, p.Namespace+"/"+p.Name); err != nil {
		return err
	}
	ev := &policyv1.Eviction{
		ObjectMeta:    metav1.ObjectMeta{Namespace: p.Namespace, Name: p.Name},
		DeleteOptions: &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &p.UID}},
	}
	return s.cfg.Client.CoreV1().Pods(p.Namespace).EvictV1(ctx, ev)
}

// releaseGroupClaims releases the shared claims of victim PodGroups whose
// pods are all gone: nothing else frees a claim reserved for a PodGroup
// that still exists. The group gets them again when it is placed again.
func (s *Scheduler) releaseGroupClaims(ctx context.Context, rec *nominationRecord, live map[types.UID]bool) error {
	for _, c := range rec.Claims {
		if c.Group == "" || s.groupRunning(rec, c.Group, live) {
			continue
		}
		if _, err := s.commits.ReleaseClaim(ctx, c.Namespace, c.Name, c.UID, map[types.UID]bool{c.Group: true}, everyAllocation); err != nil {
			return err
		}
	}
	return nil
}

func everyAllocation(*resourceapi.AllocationResult) bool { return true }

// groupRunning reports whether a victim PodGroup still has a recorded pod.
func (s *Scheduler) groupRunning(rec *nominationRecord, group types.UID, live map[types.UID]bool) bool {
	for _, v := range rec.Victims {
		if live[v.UID] && s.podGroupUID(v.Unit) == group {
			return true
		}
	}
	return false
}

// victimClaimsLeft counts the record's claims still allocated.
func (s *Scheduler) victimClaimsLeft(rec *nominationRecord) int {
	n := 0
	for _, c := range rec.Claims {
		if rc, err := s.claims.ResourceClaims(c.Namespace).Get(c.Name); err == nil && rc.UID == c.UID && rc.Status.Allocation != nil {
			n++
		}
	}
	return n
}

// nominatePods sets status.nominatedNodeName on the gang's pods, as
// kube-scheduler does for a preemptor; best effort.
func (s *Scheduler) nominatePods(ctx context.Context, d *placement.Decision) {
	err := commit.Parallel(ctx, s.cfg.CommitParallelism, len(d.Pods), func(ctx context.Context, i int) error {
		pp := d.Pods[i]
		s.patchPodStatus(ctx, &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: pp.Namespace, Name: pp.Name}}, map[string]any{"nominatedNodeName": pp.Node})
		return nil
	})
	if err != nil {
		klog.FromContext(ctx).Error(err, "Setting nominatedNodeName")
	}
}

// unnominatePods clears nominatedNodeName on the gang's waiting pods.
func (s *Scheduler) unnominatePods(ctx context.Context, a *attempt) {
	pods := []*v1.Pod{a.pod}
	if a.pg != nil {
		ms, err := s.members(a.pg)
		if err != nil {
			return
		}
		pods = ms.pending
	}
	_ = commit.Parallel(ctx, s.cfg.CommitParallelism, len(pods), func(ctx context.Context, i int) error {
		if pods[i] != nil && pods[i].Status.NominatedNodeName != "" {
			s.patchPodStatus(ctx, pods[i], map[string]any{"nominatedNodeName": nil})
		}
		return nil
	})
}

// patchPodStatus merge-patches a pod's status, best effort (logged).
func (s *Scheduler) patchPodStatus(ctx context.Context, p *v1.Pod, status map[string]any) {
	if err := s.gate.Fenced(); err != nil {
		return
	}
	patch, err := json.Marshal(map[string]any{"status": status})
	if err == nil {
		_, err = s.cfg.Client.CoreV1().Pods(p.Namespace).Patch(ctx, p.Name, types.StrategicMergePatchType, patch,
			metav1.PatchOptions{FieldManager: schedulerName}, "status")
	}
	if err != nil && !apierrors.IsNotFound(err) {
		klog.FromContext(ctx).Error(err, "Patching pod status", "pod", klog.KObj(p))
	}
}
