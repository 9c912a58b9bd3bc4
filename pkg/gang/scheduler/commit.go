package scheduler

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/gpufabric/gpufabric/pkg/gang/placement"
)

var metav1PatchOptions = metav1.PatchOptions{FieldManager: schedulerName}

// claimWrite is one claim write of a commit: an allocation plus a
// reservation, or (alloc nil) a reservation on an already allocated claim.
type claimWrite struct {
	claim    *resourceapi.ResourceClaim // as the decision saw it
	alloc    *resourceapi.AllocationResult
	consumer resourceapi.ResourceClaimConsumerReference
}

// planWrites lists a commit's claim writes in protocol order: the shared
// claims (reserved for the PodGroup), then each member's claims (reserved for
// the member), skipping reservations that exist.
func planWrites(pg *schedulingv1beta1.PodGroup, g *placement.Gang, d *placement.Decision) []claimWrite {
	allocs := map[string]*resourceapi.AllocationResult{}
	for i := range d.Claims {
		allocs[d.Claims[i].Name] = &d.Claims[i].Allocation
	}
	var out []claimWrite
	add := func(c *resourceapi.ResourceClaim, consumer resourceapi.ResourceClaimConsumerReference) {
		a := allocs[c.Name]
		if a == nil && (c.Status.Allocation == nil || reservedFor(c, consumer.UID)) {
			return // the engine left it out, or nothing to add
		}
		out = append(out, claimWrite{claim: c, alloc: a, consumer: consumer})
	}
	if pg != nil {
		ref := resourceapi.ResourceClaimConsumerReference{APIGroup: schedulingv1beta1.GroupName, Resource: "podgroups", Name: pg.Name, UID: pg.UID}
		for _, c := range g.SharedClaims {
			add(c, ref)
		}
	}
	for _, m := range g.Members {
		ref := resourceapi.ResourceClaimConsumerReference{Resource: "pods", Name: m.Pod.Name, UID: m.Pod.UID}
		for _, c := range m.Claims {
			add(c, ref)
		}
	}
	return out
}

func reservedFor(c *resourceapi.ResourceClaim, uid types.UID) bool {
	return slices.ContainsFunc(c.Status.ReservedFor, func(r resourceapi.ResourceClaimConsumerReference) bool { return r.UID == uid })
}

// errConflict marks a commit that lost a race: someone changed an object the
// decision was made on.
var errConflict = errors.New("conflict")

// commit writes a decision in protocol order. On failure it rolls back or
// finishes what it wrote (recovery of this gang) and returns the error;
// a lost race wraps errConflict. A hook abort returns without undoing
// anything, once the writes already started have returned.
func (s *Scheduler) commit(ctx context.Context, pg *schedulingv1beta1.PodGroup, g *placement.Gang, d *placement.Decision) error {
	start := time.Now()
	defer func() { s.cfg.Metrics.observeCommit(time.Since(start).Seconds()) }()
	writes := planWrites(pg, g, d)
	err := s.writeAll(ctx, pg, d, writes)
	if err == nil || errors.Is(err, ErrAborted) {
		return err
	}
	if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
		err = fmt.Errorf("%w: %w", errConflict, err)
	}
	klog.FromContext(ctx).V(2).Info("Commit failed, undoing it", "gang", d.Gang, "err", err)
	var rerr error
	if pg != nil {
		rerr = s.recoverGroupByName(ctx, pg.Namespace, pg.Name)
	} else {
		rerr = s.releasePodClaims(ctx, g.Members[0].Pod, writes)
	}
	if errors.Is(rerr, ErrAborted) {
		return rerr
	}
	if rerr != nil {
		return errors.Join(err, fmt.Errorf("undo commit: %w", rerr))
	}
	return err
}

// writeAll writes a decision phase by phase: intent, shared claims, per-pod
// claims, bindings, condition, clear intent. The writes of one phase run in
// parallel (Config.CommitParallelism); a phase starts only after every
// write of the previous one succeeded, so "a member is bound" still implies
// "every claim write is done".
func (s *Scheduler) writeAll(ctx context.Context, pg *schedulingv1beta1.PodGroup, d *placement.Decision, writes []claimWrite) error {
	if pg != nil {
		in := newIntent(d, writes)
		var err error
		if pg, err = s.patchIntent(ctx, pg, &in); err != nil {
			return err
		}
	}
	shared, perPod := splitShared(writes)
	if err := s.writeClaims(ctx, shared); err != nil {
		return err
	}
	if err := s.writeClaims(ctx, perPod); err != nil {
		return err
	}
	err := parallel(ctx, s.cfg.CommitParallelism, len(d.Pods), func(ctx context.Context, i int) error {
		pp := d.Pods[i]
		return s.bind(ctx, pp.Namespace, pp.Name, pp.UID, pp.Node)
	})
	if err != nil {
		return err
	}
	if pg != nil {
		msg := fmt.Sprintf("placed %d pods in %s %s", len(d.Pods), d.TopologyKey, d.Domain)
		if err := s.setCondition(ctx, pg, metav1.ConditionTrue, "Scheduled", msg); err != nil {
			return err
		}
		if _, err := s.patchIntent(ctx, pg, nil); err != nil {
			return err
		}
	}
	return s.step(StepDone, d.Gang)
}

// splitShared splits planWrites' output into the shared claims' writes
// (reserved for the PodGroup, listed first) and the members' claims' writes.
func splitShared(writes []claimWrite) (shared, perPod []claimWrite) {
	i := slices.IndexFunc(writes, func(w claimWrite) bool { return w.consumer.Resource != "podgroups" })
	if i < 0 {
		i = len(writes)
	}
	return writes[:i], writes[i:]
}

// writeClaims runs one phase of claim writes in parallel.
func (s *Scheduler) writeClaims(ctx context.Context, writes []claimWrite) error {
	return parallel(ctx, s.cfg.CommitParallelism, len(writes), func(ctx context.Context, i int) error {
		return s.writeClaim(ctx, writes[i])
	})
}

// writeClaim adds the deallocation finalizer when the claim gets an
// allocation (kube-controller-manager clears the allocation of a claim that
// carries it once the last consumer is gone), then writes allocation and
// reservation in one status update. Both writes carry the resourceVersion
// the decision saw.
func (s *Scheduler) writeClaim(ctx context.Context, w claimWrite) error {
	c := w.claim
	name := c.Namespace + "/" + c.Name
	claims := s.cfg.Client.ResourceV1().ResourceClaims(c.Namespace)
	if w.alloc != nil && !slices.Contains(c.Finalizers, resourceapi.Finalizer) {
		if err := s.step(StepClaimFinalizer, name); err != nil {
			return err
		}
		c = c.DeepCopy()
		c.Finalizers = append(c.Finalizers, resourceapi.Finalizer)
		var err error
		if c, err = claims.Update(ctx, c, metav1.UpdateOptions{FieldManager: schedulerName}); err != nil {
			return fmt.Errorf("add finalizer to claim %s: %w", name, err)
		}
	}
	if err := s.step(StepClaimStatus, name); err != nil {
		return err
	}
	c = c.DeepCopy()
	if w.alloc != nil {
		c.Status.Allocation = w.alloc.DeepCopy()
	}
	c.Status.ReservedFor = append(c.Status.ReservedFor, w.consumer)
	if _, err := claims.UpdateStatus(ctx, c, metav1.UpdateOptions{FieldManager: schedulerName}); err != nil {
		return fmt.Errorf("allocate claim %s: %w", name, err)
	}
	return nil
}

// bind binds a pod; the binding carries the pod's UID as a precondition.
func (s *Scheduler) bind(ctx context.Context, namespace, name string, uid types.UID, node string) error {
	if err := s.step(StepBind, namespace+"/"+name); err != nil {
		return err
	}
	b := &v1.Binding{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, UID: uid},
		Target:     v1.ObjectReference{Kind: "Node", Name: node},
	}
	if err := s.cfg.Client.CoreV1().Pods(namespace).Bind(ctx, b, metav1.CreateOptions{FieldManager: schedulerName}); err != nil {
		return fmt.Errorf("bind pod %s/%s to %s: %w", namespace, name, node, err)
	}
	return nil
}
