package replace

import (
	"context"
	"fmt"
	"strings"

	v1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"github.com/gpufabric/gpufabric/pkg/gang/gate"
	"github.com/gpufabric/gpufabric/pkg/gang/vocab"
)

// evictLost deletes the lost members of a Pod-mode gang through the
// Eviction API (its PodDisruptionBudgets apply: a refusal is retried on
// the gang's next turn) so that their controller recreates them (a Job
// replaces a terminating pod by default): a pod on a deleted node at once
// (no kubelet will confirm it), the others with their grace period (on an
// unreachable node the pod stays Terminating until the node comes back or
// is deleted, and counts as gone meanwhile). Failed pods are left to
// their controller, which replaces them and keeps their logs.
func (r *Replacer) evictLost(ctx context.Context, pg *schedulingv1beta1.PodGroup, fresh []Loss) error {
	var deleted []string
	for _, l := range fresh {
		if l.Trigger == PodFailed {
			continue
		}
		var grace *int64
		if l.Trigger == NodeDeleted {
			grace = new(int64)
		}
		ok, err := r.evict(ctx, l.Pod, grace)
		if err != nil {
			return err
		}
		if ok {
			deleted = append(deleted, l.Why)
		}
	}
	if len(deleted) > 0 {
		klog.FromContext(ctx).Info("Deleted lost gang members for their replacement in place", "podgroup", klog.KObj(pg), "members", len(deleted))
		r.d.Report.Event(pg, v1.EventTypeWarning, vocab.EventReplacingInPlace, "Replacing",
			fmt.Sprintf("lost %s: evicted, to be replaced in place in the gang's domain when its controller recreates them", joinCut(deleted)))
	}
	return nil
}

// joinCut joins at most maxLost descriptions and counts the others.
func joinCut(s []string) string {
	if len(s) <= maxLost {
		return strings.Join(s, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(s[:maxLost], ", "), len(s)-maxLost)
}

// fail fails a PodGroup (policy Fail): the Failed condition (the PodGroup
// is never placed again), an event, the metric, then its members'
// evictions.
func (r *Replacer) fail(ctx context.Context, t Turn, st *gangState, why string) error {
	msg := fmt.Sprintf("member %s was lost (%s) and %s; policy Fail: its members are evicted and nothing of this PodGroup is placed again until it is recreated",
		r.lostOf(st), st.trigger, why)
	err := r.d.Conditions.SetCondition(ctx, t.PodGroup, metav1.Condition{Type: vocab.ConditionFailed, Status: metav1.ConditionTrue,
		Reason: vocab.ReasonNoReplacement, Message: msg})
	if err != nil {
		return err
	}
	r.d.Report.Event(t.PodGroup, v1.EventTypeWarning, vocab.EventGangFailed, "Failing", msg)
	r.d.Metrics.observe(st.trigger, OutcomeFailed, r.clock.Since(st.since).Seconds())
	r.end(t.Key, st, t.Cond)
	return r.EvictFailed(ctx, t.Running)
}

// EvictFailed evicts the running members of a failed PodGroup through the
// Eviction API (a PodDisruptionBudget may refuse: the next turn tries
// again).
func (r *Replacer) EvictFailed(ctx context.Context, running []*v1.Pod) error {
	for _, p := range running {
		if p.DeletionTimestamp != nil {
			continue
		}
		if _, err := r.evict(ctx, p, nil); err != nil {
			return err
		}
	}
	return nil
}

// evict evicts p (the pod with p's UID only; grace, when set, is its
// grace period) past the gate, and reports whether the API took it; a
// refusal (a PodDisruptionBudget) or a pod already gone is no error.
func (r *Replacer) evict(ctx context.Context, p *v1.Pod, grace *int64) (bool, error) {
	if err := r.d.Gate.Check(gate.StepEvict, p.Namespace+"/"+p.Name); err != nil {
		return false, err
	}
	ev := &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: p.Name},
		DeleteOptions: &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &p.UID}, GracePeriodSeconds: grace}}
	err := r.d.Client.CoreV1().Pods(p.Namespace).EvictV1(ctx, ev)
	switch {
	case err == nil:
		return true, nil
	case apierrors.IsNotFound(err) || apierrors.IsConflict(err):
		return false, nil
	case apierrors.IsTooManyRequests(err):
		klog.FromContext(ctx).V(2).Info("Eviction of a lost or failed gang's member refused; retried", "pod", klog.KObj(p))
		return false, nil
	}
	return false, fmt.Errorf("evict %s/%s: %w", p.Namespace, p.Name, err)
}
