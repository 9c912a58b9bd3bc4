package evict

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	v1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	resourceapi "k8s.io/api/resource/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/gpufabric/gpufabric/pkg/gang/commit"
	"github.com/gpufabric/gpufabric/pkg/gang/gate"
	"github.com/gpufabric/gpufabric/pkg/gang/placement"
	"github.com/gpufabric/gpufabric/pkg/gang/podstate"
	"github.com/gpufabric/gpufabric/pkg/gang/report"
	"github.com/gpufabric/gpufabric/pkg/gang/vocab"
)

// evictNominated evicts the record's victims that still run, covered by a
// PodDisruptionBudget first. It returns which victim pods are still there
// (by UID) and how many.
func (e *Evictor) evictNominated(ctx context.Context, a *Attempt, nm *nomination) (map[types.UID]bool, int, error) {
	live := map[types.UID]bool{}
	var first, rest []*v1.Pod
	groups := map[string]*victimGroup{}
	for _, vp := range nm.rec.Victims {
		p, err := e.cfg.Pods.Pods(vp.Namespace).Get(vp.Name)
		if err != nil || p.UID != vp.UID || podstate.Terminated(p) {
			continue
		}
		live[p.UID] = true
		if p.DeletionTimestamp != nil || p.Spec.NodeName == "" || e.victims.priority(p, groups) >= nm.rec.Priority {
			continue // going already, or no longer a victim: never evicted
		}
		if covered, _ := e.victims.coveredByBudget(p); covered {
			first = append(first, p)
		} else {
			rest = append(rest, p)
		}
	}
	marked, all := map[string]bool{}, slices.Concat(first, rest)
	for _, batch := range [][]*v1.Pod{first, rest} {
		for _, p := range batch {
			if unit := nm.rec.unitOf(p.UID); unit != "" && !marked[unit] {
				marked[unit] = true
				e.markVictimUnit(ctx, a, nm, unit, all)
			}
		}
		err := commit.Parallel(ctx, e.cfg.Parallelism, len(batch), func(ctx context.Context, i int) error {
			return e.evictVictim(ctx, a, nm, batch[i])
		})
		if err != nil {
			return live, len(live), err
		}
	}
	return live, len(live), nil
}

// markVictimUnit reports a victim unit: the event once per unit; for a
// whole PodGroup its DisruptionTarget condition; for a CompositePodGroup's
// subtree the event on the CompositePodGroup and DisruptionTarget on each
// of its PodGroups that pods (the victims being evicted) name.
func (e *Evictor) markVictimUnit(ctx context.Context, a *Attempt, nm *nomination, unit string, pods []*v1.Pod) {
	isGroup, ns, name := vocab.SplitKey(unit)
	composite := vocab.IsCompositeKey(unit)
	e.cfg.Metrics.victim(isGroup || composite)
	var names []string
	switch {
	case isGroup:
		names = []string{name}
	case composite:
		if c := e.victims.composite(ns, name); c != nil {
			e.cfg.Report.Event(c, v1.EventTypeWarning, vocab.EventPreempted, "Preempting", preemptedMessage(a, nm, ns))
		}
		seen := map[string]bool{}
		for _, p := range pods {
			if g := podGroupName(p); g != "" && !seen[g] && nm.rec.unitOf(p.UID) == unit {
				seen[g] = true
				names = append(names, g)
			}
		}
	}
	for _, g := range names {
		e.markVictimGroup(ctx, a, nm, ns, g)
	}
}

// markVictimGroup gives a victim PodGroup the Preempted event and its
// DisruptionTarget condition.
func (e *Evictor) markVictimGroup(ctx context.Context, a *Attempt, nm *nomination, ns, name string) {
	pg, err := e.cfg.PodGroups.PodGroups(ns).Get(name)
	if err != nil {
		return
	}
	msg := preemptedMessage(a, nm, pg.Namespace)
	e.cfg.Report.Event(pg, v1.EventTypeWarning, vocab.EventPreempted, "Preempting", msg)
	err = e.cfg.Conditions.SetCondition(ctx, pg, metav1.Condition{
		Type: schedulingv1beta1.DisruptionTarget, Status: metav1.ConditionTrue, Reason: vocab.ReasonPreemptionByScheduler, Message: msg,
	})
	if err != nil && !errors.Is(err, gate.ErrFenced) && !errors.Is(err, gate.ErrAborted) {
		klog.FromContext(ctx).Error(err, "Setting DisruptionTarget on a preempted PodGroup", "podgroup", klog.KObj(pg))
	}
}

// preemptedMessage tells a victim of namespace ns who preempted it: the
// preemptor's name only when it is of ns.
func preemptedMessage(a *Attempt, nm *nomination, ns string) string {
	return fmt.Sprintf("%s: preempted by %s (priority %d) to make room in %s",
		schedulerName, a.describeTo(ns), nm.rec.Priority, commit.Where(nm.rec.TopologyKey, nm.rec.Domain))
}

// evictVictim evicts one victim pod through the Eviction API (its
// PodDisruptionBudgets apply) with its own grace period; then, for a pod
// this scheduler schedules, it names the preemptor in the pod's
// DisruptionTarget condition (the Eviction API sets a generic one).
func (e *Evictor) evictVictim(ctx context.Context, a *Attempt, nm *nomination, p *v1.Pod) error {
	err := e.w.evict(ctx, p)
	switch {
	case errors.Is(err, gate.ErrAborted) || errors.Is(err, gate.ErrFenced):
		return err
	case apierrors.IsNotFound(err) || apierrors.IsConflict(err):
		return nil
	case apierrors.IsTooManyRequests(err):
		if p.Namespace != a.namespace() {
			// Told to the preemptor: the victim and its budget are not.
			return fmt.Errorf("%w: evicting a pod of another namespace for %s: a PodDisruptionBudget refused it", errEvictionRefused, a.describe())
		}
		return fmt.Errorf("%w: evicting %s/%s for %s: %v", errEvictionRefused, p.Namespace, p.Name, a.describe(), err)
	case err != nil:
		return fmt.Errorf("evict %s/%s: %w", p.Namespace, p.Name, err)
	}
	msg := preemptedMessage(a, nm, p.Namespace)
	e.cfg.Report.Event(p, v1.EventTypeWarning, vocab.EventPreempted, "Preempting", msg)
	if podstate.Ours(p) {
		e.w.patchPodStatus(ctx, p, map[string]any{"conditions": []v1.PodCondition{{
			Type: v1.DisruptionTarget, Status: v1.ConditionTrue, Reason: vocab.ReasonPreemptionByScheduler,
			Message: report.Message(msg), LastTransitionTime: metav1.Now(),
		}}})
	}
	return nil
}

// releaseGroupClaims releases the shared claims of victim PodGroups whose
// pods are all gone: nothing else frees a claim reserved for a PodGroup
// that still exists. The group gets them again when it is placed again.
func (e *Evictor) releaseGroupClaims(ctx context.Context, rec *nominationRecord, live map[types.UID]bool) error {
	var running map[types.UID]bool
	for _, c := range rec.Claims {
		if c.Group == "" {
			continue
		}
		if running == nil {
			running = e.victims.groupsRunning(rec, live)
		}
		if running[c.Group] {
			continue
		}
		if _, err := e.cfg.Releaser.ReleaseClaim(ctx, c.Namespace, c.Name, c.UID, map[types.UID]bool{c.Group: true}, everyAllocation); err != nil {
			return err
		}
	}
	return nil
}

func everyAllocation(*resourceapi.AllocationResult) bool { return true }

// victimClaimsLeft counts the record's claims still allocated.
func (e *Evictor) victimClaimsLeft(rec *nominationRecord) int {
	n := 0
	for _, c := range rec.Claims {
		if rc, err := e.cfg.Claims.ResourceClaims(c.Namespace).Get(c.Name); err == nil && rc.UID == c.UID && rc.Status.Allocation != nil {
			n++
		}
	}
	return n
}

// nominatePods sets status.nominatedNodeName on the gang's pods, as
// kube-scheduler does for a preemptor; best effort.
func (e *Evictor) nominatePods(ctx context.Context, d *placement.Decision) {
	err := commit.Parallel(ctx, e.cfg.Parallelism, len(d.Pods), func(ctx context.Context, i int) error {
		pp := d.Pods[i]
		e.w.patchPodStatus(ctx, &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: pp.Namespace, Name: pp.Name}}, map[string]any{"nominatedNodeName": pp.Node})
		return nil
	})
	if err != nil {
		klog.FromContext(ctx).Error(err, "Setting nominatedNodeName")
	}
}

// unnominatePods clears nominatedNodeName on the gang's waiting pods (a
// tree's: those of its attempt).
func (e *Evictor) unnominatePods(ctx context.Context, a *Attempt) {
	pods := []*v1.Pod{a.Pod}
	switch {
	case a.Root != nil:
		pods = a.Members
	case a.PodGroup != nil:
		waiting, err := e.cfg.Gangs.Waiting(a.PodGroup)
		if err != nil {
			return
		}
		pods = waiting
	}
	_ = commit.Parallel(ctx, e.cfg.Parallelism, len(pods), func(ctx context.Context, i int) error {
		if pods[i] != nil && pods[i].Status.NominatedNodeName != "" {
			e.w.patchPodStatus(ctx, pods[i], map[string]any{"nominatedNodeName": nil})
		}
		return nil
	})
}

// writer evicts pods and patches their status: the writes the Evictor and
// the Restarter share.
type writer struct {
	cfg *Config
}

// evict asks the Eviction API to evict p, the pod with p's UID only (the
// commit hook's gate.StepEvict first). The API's error is returned as it is.
func (w *writer) evict(ctx context.Context, p *v1.Pod) error {
	if err := w.cfg.Gate.Check(gate.StepEvict, p.Namespace+"/"+p.Name); err != nil {
		return err
	}
	ev := &policyv1.Eviction{
		ObjectMeta:    metav1.ObjectMeta{Namespace: p.Namespace, Name: p.Name},
		DeleteOptions: &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &p.UID}},
	}
	return w.cfg.Client.CoreV1().Pods(p.Namespace).EvictV1(ctx, ev)
}

// patchPodStatus merge-patches a pod's status, best effort (logged).
func (w *writer) patchPodStatus(ctx context.Context, p *v1.Pod, status map[string]any) {
	if err := w.cfg.Gate.Fenced(); err != nil {
		return
	}
	patch, err := json.Marshal(map[string]any{"status": status})
	if err == nil {
		_, err = w.cfg.Client.CoreV1().Pods(p.Namespace).Patch(ctx, p.Name, types.StrategicMergePatchType, patch,
			metav1.PatchOptions{FieldManager: schedulerName}, "status")
	}
	if err != nil && !apierrors.IsNotFound(err) {
		klog.FromContext(ctx).Error(err, "Patching pod status", "pod", klog.KObj(p))
	}
}
