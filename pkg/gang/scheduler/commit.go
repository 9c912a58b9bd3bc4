package scheduler

import (
	"context"
	"errors"
	"fmt"
	"github.com/gpufabric/gpufabric/pkg/gang/gate"
	"github.com/gpufabric/gpufabric/pkg/gang/vocab"
	"slices"
	"strings"
	"sync"
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

// claimWrite is one claim write of a commit: an allocation plus a
// reservation, or (alloc nil) a reservation on an already allocated claim.
type claimWrite struct {
	claim    *resourceapi.ResourceClaim // as the decision saw it
	alloc    *resourceapi.AllocationResult
	consumer resourceapi.ResourceClaimConsumerReference
}

// planWrites lists a commit's claim writes in protocol order: the shared
// claims (reserved for the PodGroup), then each placed member's claims
// (reserved for the member), skipping reservations that exist.
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
	placed := map[types.UID]bool{}
	for _, pp := range d.Pods {
		placed[pp.UID] = true
	}
	for _, m := range g.Members {
		if !placed[m.Pod.UID] {
			continue // left for later (minCount below the gang's size)
		}
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

// commitRun is one commit of a decision.
type commitRun struct {
	pg     *schedulingv1beta1.PodGroup // nil for a gang of one
	gang   *placement.Gang
	d      *placement.Decision
	writes []claimWrite

	mu sync.Mutex
	// written: the resourceVersion of each claim after the commit's write,
	// by claim UID (the assume cache waits for the informers to reach it).
	written map[types.UID]string
}

func (c *commitRun) wrote(claim *resourceapi.ResourceClaim) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.written[claim.UID] = claim.ResourceVersion
}

// commit writes a decision in protocol order and returns the written
// claims' resourceVersions. On failure it rolls back or finishes what it
// wrote (recovery of this gang) and returns the error; a lost race wraps
// errConflict. A hook abort or a lost Lease returns without undoing
// anything, once the writes already started have returned.
func (s *Scheduler) commit(ctx context.Context, pg *schedulingv1beta1.PodGroup, g *placement.Gang, d *placement.Decision) (map[types.UID]string, error) {
	start := time.Now()
	defer func() { s.cfg.Metrics.observeCommit(time.Since(start).Seconds()) }()
	c := &commitRun{pg: pg, gang: g, d: d, writes: planWrites(pg, g, d), written: map[types.UID]string{}}
	err := s.writeAll(ctx, c)
	if err == nil || gate.Stops(err) {
		return c.written, err
	}
	if apierrors.IsConflict(err) || apierrors.IsNotFound(err) || apierrors.IsAlreadyExists(err) {
		err = fmt.Errorf("%w: %w", errConflict, err)
	}
	klog.FromContext(ctx).V(2).Info("Commit failed, undoing it", "gang", d.Gang, "err", err)
	var rerr error
	if pg != nil {
		if cm := s.records.get(pg.UID); cm != nil {
			rerr = s.recoverRecord(ctx, cm)
		}
	} else {
		rerr = s.releasePodClaims(ctx, g.Members[0].Pod, c.writes)
	}
	if gate.Stops(rerr) {
		return nil, rerr
	}
	if rerr != nil {
		return nil, errors.Join(err, fmt.Errorf("undo commit: %w", rerr))
	}
	return nil, err
}

// writeAll writes a decision phase by phase: record, shared claims, per-pod
// claims, bindings, condition, clear record. The writes of one phase run in
// parallel (Config.CommitParallelism); a phase starts only after every
// write of the previous one succeeded, so "a member is bound" still implies
// "every claim write is done".
func (s *Scheduler) writeAll(ctx context.Context, c *commitRun) error {
	var record *v1.ConfigMap
	shared, perPod := splitShared(c.writes)
	phases := []struct {
		name string
		skip bool
		run  func(ctx context.Context) error
	}{
		{phaseRecord, c.pg == nil, func(ctx context.Context) error {
			var err error
			record, err = s.createRecord(ctx, newRecord(c.pg, c.d, c.writes))
			if apierrors.IsAlreadyExists(err) {
				s.adoptRecord(ctx, c.pg.UID) // a record this term did not know of: recover it first
			}
			return err
		}},
		{phaseSharedClaims, len(shared) == 0, func(ctx context.Context) error { return s.writeClaims(ctx, c, shared) }},
		{phasePodClaims, len(perPod) == 0, func(ctx context.Context) error { return s.writeClaims(ctx, c, perPod) }},
		{phaseBind, false, func(ctx context.Context) error {
			return parallel(ctx, s.cfg.CommitParallelism, len(c.d.Pods), func(ctx context.Context, i int) error {
				pp := c.d.Pods[i]
				return s.bind(ctx, pp.Namespace, pp.Name, pp.UID, pp.Node)
			})
		}},
		{phaseCondition, c.pg == nil, func(ctx context.Context) error {
			return s.setCondition(ctx, c.pg, metav1.ConditionTrue, vocab.ReasonScheduled, placedMessage(c.gang, c.d))
		}},
		{phaseClearRecord, c.pg == nil, func(ctx context.Context) error {
			return s.deleteRecord(ctx, record, c.pg.Namespace+"/"+c.pg.Name)
		}},
	}
	var took phaseTimes
	for _, ph := range phases {
		if ph.skip {
			continue
		}
		start := time.Now()
		err := ph.run(ctx)
		took = append(took, phaseTime{ph.name, time.Since(start)})
		s.cfg.Metrics.observePhase(ph.name, time.Since(start).Seconds())
		if err != nil {
			return err
		}
	}
	klog.FromContext(ctx).V(2).Info("Committed gang", "pods", len(c.d.Pods), "claimWrites", len(c.writes), "phases", took)
	return s.gate.Check(gate.StepDone, c.d.Gang)
}

// phaseTime is how long one commit phase took.
type phaseTime struct {
	phase string
	took  time.Duration
}

// phaseTimes are a commit's phases in order, logged as
// "record=12ms pod-claims=1.2s …".
type phaseTimes []phaseTime

func (p phaseTimes) String() string {
	parts := make([]string, len(p))
	for i, t := range p {
		parts[i] = t.phase + "=" + t.took.Round(time.Microsecond).String()
	}
	return strings.Join(parts, " ")
}

// adoptRecord reads a commit record that exists but was not in this term's
// set, so that the gang's next attempt recovers it first.
func (s *Scheduler) adoptRecord(ctx context.Context, uid types.UID) {
	cm, err := s.cfg.Client.CoreV1().ConfigMaps(s.cfg.RecordNamespace).Get(ctx, vocab.RecordName(uid), metav1.GetOptions{})
	if err != nil {
		klog.FromContext(ctx).Error(err, "Reading an unknown commit record", "record", vocab.RecordName(uid))
		return
	}
	s.records.put(cm)
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
func (s *Scheduler) writeClaims(ctx context.Context, c *commitRun, writes []claimWrite) error {
	return parallel(ctx, s.cfg.CommitParallelism, len(writes), func(ctx context.Context, i int) error {
		out, err := s.writeClaim(ctx, writes[i])
		if err == nil {
			c.wrote(out)
		}
		return err
	})
}

// writeClaim adds the deallocation finalizer when the claim gets an
// allocation (kube-controller-manager clears the allocation of a claim that
// carries it once the last consumer is gone), then writes allocation and
// reservation in one status update. Both writes carry the resourceVersion
// the decision saw. It returns the claim as written.
func (s *Scheduler) writeClaim(ctx context.Context, w claimWrite) (*resourceapi.ResourceClaim, error) {
	c := w.claim
	name := c.Namespace + "/" + c.Name
	claims := s.cfg.Client.ResourceV1().ResourceClaims(c.Namespace)
	if w.alloc != nil && !slices.Contains(c.Finalizers, resourceapi.Finalizer) {
		if err := s.gate.Check(gate.StepClaimFinalizer, name); err != nil {
			return nil, err
		}
		c = c.DeepCopy()
		c.Finalizers = append(c.Finalizers, resourceapi.Finalizer)
		var err error
		if c, err = claims.Update(ctx, c, metav1.UpdateOptions{FieldManager: schedulerName}); err != nil {
			return nil, fmt.Errorf("add finalizer to claim %s: %w", name, err)
		}
	}
	if err := s.gate.Check(gate.StepClaimStatus, name); err != nil {
		return nil, err
	}
	c = c.DeepCopy()
	if w.alloc != nil {
		c.Status.Allocation = w.alloc.DeepCopy()
		// Dropped by the apiserver unless DRADeviceBindingConditions is
		// on; where it is kept, double-allocation repair orders by it.
		now := metav1.Now()
		c.Status.Allocation.AllocationTimestamp = &now
	}
	c.Status.ReservedFor = append(c.Status.ReservedFor, w.consumer)
	out, err := claims.UpdateStatus(ctx, c, metav1.UpdateOptions{FieldManager: schedulerName})
	if err != nil {
		return nil, fmt.Errorf("allocate claim %s: %w", name, err)
	}
	return out, nil
}

// bind binds a pod; the binding carries the pod's UID as a precondition.
func (s *Scheduler) bind(ctx context.Context, namespace, name string, uid types.UID, node string) error {
	if err := s.gate.Check(gate.StepBind, namespace+"/"+name); err != nil {
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
