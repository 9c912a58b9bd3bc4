package commit

import (
	"context"
	"errors"
	"fmt"
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

	"github.com/gpufabric/gpufabric/pkg/gang/gate"
	"github.com/gpufabric/gpufabric/pkg/gang/placement"
	"github.com/gpufabric/gpufabric/pkg/gang/vocab"
)

// ErrConflict marks a commit that lost a race: someone changed an object
// the decision was made on. The gang is retried on a fresh snapshot.
var ErrConflict = errors.New("conflict")

// claimWrite is one claim write of a commit: an allocation plus
// reservations, or (alloc nil) reservations added to an already allocated
// claim. A claim has at most one write per commit, with every consumer
// the commit reserves it for.
type claimWrite struct {
	claim     *resourceapi.ResourceClaim // as the decision saw it
	alloc     *resourceapi.AllocationResult
	consumers []resourceapi.ResourceClaimConsumerReference
	// shared: one of the gang's SharedClaims, written in the shared_claims
	// phase.
	shared bool
}

// planWrites lists a commit's claim writes in protocol order: the shared
// claims (reserved for the PodGroup, or for every placed member when the
// members name the claim themselves: Gang.MemberShared), then each placed
// member's claims (reserved for the member), skipping reservations that
// exist. A claim several members use gets one write that reserves it for
// all of them, as kube-scheduler reserves a claim for each pod sharing it.
func planWrites(pg *schedulingv1beta1.PodGroup, g *placement.Gang, d *placement.Decision) []claimWrite {
	allocs := map[string]*resourceapi.AllocationResult{}
	for i := range d.Claims {
		allocs[d.Claims[i].Name] = &d.Claims[i].Allocation
	}
	var out []claimWrite
	at := map[types.UID]int{} // claim UID → its write in out
	add := func(c *resourceapi.ResourceClaim, consumer resourceapi.ResourceClaimConsumerReference, shared bool) {
		a := allocs[c.Name]
		if a == nil && (c.Status.Allocation == nil || ReservedFor(c, consumer.UID)) {
			return // the engine left it out, or nothing to add
		}
		if i, ok := at[c.UID]; ok {
			if !slices.ContainsFunc(out[i].consumers, func(r resourceapi.ResourceClaimConsumerReference) bool { return r.UID == consumer.UID }) {
				out[i].consumers = append(out[i].consumers, consumer)
			}
			return
		}
		at[c.UID] = len(out)
		out = append(out, claimWrite{claim: c, alloc: a, consumers: []resourceapi.ResourceClaimConsumerReference{consumer}, shared: shared})
	}
	placed := map[types.UID]bool{}
	for _, pp := range d.Pods {
		placed[pp.UID] = true
	}
	var members []placement.Member // placed, in gang order
	for _, m := range g.Members {
		if placed[m.Pod.UID] {
			members = append(members, m) // the others are left for later (minCount below the gang's size)
		}
	}
	podRef := func(p *v1.Pod) resourceapi.ResourceClaimConsumerReference {
		return resourceapi.ResourceClaimConsumerReference{Resource: "pods", Name: p.Name, UID: p.UID}
	}
	if pg != nil {
		ref := resourceapi.ResourceClaimConsumerReference{APIGroup: schedulingv1beta1.GroupName, Resource: "podgroups", Name: pg.Name, UID: pg.UID}
		for _, c := range g.SharedClaims {
			if !g.MemberShared[c.UID] {
				add(c, ref, true)
				continue
			}
			for _, m := range members {
				add(c, podRef(m.Pod), true)
			}
		}
	}
	for _, m := range members {
		for _, c := range m.Claims {
			add(c, podRef(m.Pod), false)
		}
	}
	return out
}

// doubleAllocated names a claim the decision allocates twice, "" when
// none is: such a decision is refused before anything is written.
func doubleAllocated(d *placement.Decision) string {
	seen := make(map[string]bool, len(d.Claims))
	for _, c := range d.Claims {
		if seen[c.Name] {
			return c.Namespace + "/" + c.Name
		}
		seen[c.Name] = true
	}
	return ""
}

// ReservedFor reports whether a claim is reserved for the consumer with
// uid.
func ReservedFor(c *resourceapi.ResourceClaim, uid types.UID) bool {
	return slices.ContainsFunc(c.Status.ReservedFor, func(r resourceapi.ResourceClaimConsumerReference) bool { return r.UID == uid })
}

// Txn is one commit of a decision, as a transaction: Run writes it in
// protocol order, phase by phase, and undoes it when a write fails; Undo
// is that undo (the recovery of this one gang). A Txn is run once.
type Txn struct {
	c      *Committer
	pg     *schedulingv1beta1.PodGroup // nil for a gang of one
	gang   *placement.Gang
	d      *placement.Decision
	writes []claimWrite
	// rec and record: the commit record as planned and as created (nil
	// before the record phase). Undo acts on rec for its own record: it
	// validated before it was written.
	rec    *commitRecord
	record *v1.ConfigMap

	mu sync.Mutex
	// written: the resourceVersion of each claim after the commit's write,
	// by claim UID (the assume cache waits for the informers to reach it).
	written map[types.UID]string
}

func (t *Txn) wrote(claim *resourceapi.ResourceClaim) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.written[claim.UID] = claim.ResourceVersion
}

// Written returns the written claims' resourceVersions, by claim UID; for
// a Run that succeeded.
func (t *Txn) Written() map[types.UID]string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.written
}

// Run writes the decision in protocol order. On failure it rolls back or
// finishes what it wrote (Undo) and returns the error; a lost race wraps
// ErrConflict. A hook abort or a lost Lease returns without undoing
// anything, once the writes already started have returned.
func (t *Txn) Run(ctx context.Context) error {
	start := time.Now()
	defer func() { t.c.cfg.Metrics.observeCommit(time.Since(start).Seconds()) }()
	err := t.writeAll(ctx)
	if err == nil || gate.Stops(err) {
		return err
	}
	if apierrors.IsConflict(err) || apierrors.IsNotFound(err) || apierrors.IsAlreadyExists(err) {
		err = fmt.Errorf("%w: %w", ErrConflict, err)
	}
	klog.FromContext(ctx).V(2).Info("Commit failed, undoing it", "gang", t.d.Gang, "err", err)
	rerr := t.Undo(ctx)
	if gate.Stops(rerr) {
		return rerr
	}
	if rerr != nil {
		return errors.Join(err, fmt.Errorf("undo commit: %w", rerr))
	}
	return err
}

// Undo rolls back or finishes what Run wrote, by the recovery rules: a
// PodGroup commit from its record (finished when a member is bound, else
// rolled back; nothing to do without a record), a gang of one by releasing
// its claims unless its pod got bound.
func (t *Txn) Undo(ctx context.Context) error {
	if t.pg == nil {
		return t.c.releasePodClaims(ctx, t.gang.Members[0].Pod, t.writes)
	}
	cm := t.c.records.get(t.pg.UID)
	switch {
	case cm == nil:
		return nil
	case t.record != nil && cm.UID == t.record.UID:
		return t.c.recoverRecorded(ctx, cm, t.rec)
	}
	return t.c.RecoverRecord(ctx, cm) // one an earlier term left (adoptRecord)
}

// writeAll writes a decision phase by phase: record, shared claims, per-pod
// claims, the pods' status.extendedResourceClaimStatus, bindings,
// condition, clear record. The writes of one phase run in
// parallel (Config.Parallelism); a phase starts only after every write of
// the previous one succeeded, so "a member is bound" still implies "every
// claim write is done".
func (t *Txn) writeAll(ctx context.Context) error {
	c := t.c
	if name := doubleAllocated(t.d); name != "" {
		return fmt.Errorf("the decision allocates claim %s twice; nothing was written", name)
	}
	shared, perPod := splitShared(t.writes)
	statuses := extendedStatuses(t.gang, t.d)
	phases := []struct {
		name string
		skip bool
		run  func(ctx context.Context) error
	}{
		{phaseRecord, t.pg == nil, func(ctx context.Context) error {
			t.rec = newRecord(t.pg, t.d, t.writes)
			var err error
			t.record, err = c.createRecord(ctx, t.rec)
			if apierrors.IsAlreadyExists(err) {
				c.adoptRecord(ctx, t.pg.UID) // a record this term did not know of: recover it first
			}
			return err
		}},
		{phaseSharedClaims, len(shared) == 0, func(ctx context.Context) error { return t.writeClaims(ctx, shared) }},
		{phasePodClaims, len(perPod) == 0, func(ctx context.Context) error { return t.writeClaims(ctx, perPod) }},
		{phasePodStatus, len(statuses) == 0, func(ctx context.Context) error { return t.writeStatuses(ctx, statuses) }},
		{phaseBind, false, func(ctx context.Context) error {
			return Parallel(ctx, c.cfg.Parallelism, len(t.d.Pods), func(ctx context.Context, i int) error {
				pp := t.d.Pods[i]
				return c.bind(ctx, pp.Namespace, pp.Name, pp.UID, pp.Node)
			})
		}},
		{phaseCondition, t.pg == nil, func(ctx context.Context) error {
			return c.cfg.Conditions.SetInitiallyScheduled(ctx, t.pg, metav1.ConditionTrue, vocab.ReasonScheduled, PlacedMessage(t.gang, t.d))
		}},
		{phaseClearRecord, t.pg == nil, func(ctx context.Context) error {
			return c.deleteRecord(ctx, t.record, t.pg.Namespace+"/"+t.pg.Name)
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
		c.cfg.Metrics.observePhase(ph.name, time.Since(start).Seconds())
		if err != nil {
			return err
		}
	}
	klog.FromContext(ctx).V(2).Info("Committed gang", "pods", len(t.d.Pods), "claimWrites", len(t.writes), "phases", took)
	return c.cfg.Gate.Check(gate.StepDone, t.d.Gang)
}

// writeClaims runs one phase of claim writes in parallel.
func (t *Txn) writeClaims(ctx context.Context, writes []claimWrite) error {
	return Parallel(ctx, t.c.cfg.Parallelism, len(writes), func(ctx context.Context, i int) error {
		out, err := t.c.writeClaim(ctx, writes[i])
		if err == nil {
			t.wrote(out)
		}
		return err
	})
}

// splitShared splits planWrites' output into the shared claims' writes
// (listed first) and the members' claims' writes.
func splitShared(writes []claimWrite) (shared, perPod []claimWrite) {
	i := slices.IndexFunc(writes, func(w claimWrite) bool { return !w.shared })
	if i < 0 {
		i = len(writes)
	}
	return writes[:i], writes[i:]
}

// phaseTime is how long one commit phase took.
type phaseTime struct {
	phase string
	took  time.Duration
}

// phaseTimes are a commit's phases in order, logged as
// "record=12ms pod_claims=1.2s …".
type phaseTimes []phaseTime

func (p phaseTimes) String() string {
	parts := make([]string, len(p))
	for i, t := range p {
		parts[i] = t.phase + "=" + t.took.Round(time.Microsecond).String()
	}
	return strings.Join(parts, " ")
}

// Where names a domain for messages: "<topology key> <domain>", or the
// domain alone when the key is empty.
func Where(key, domain string) string {
	if key == "" {
		return domain
	}
	return key + " " + domain
}

// PlacedMessage says where a commit placed a gang: "placed 8 pods in <key>
// <domain>" (with the split over lower levels when it spans several
// domains there: "…, over 2 gpufabric.dev/nvlinkDomain domains (a: 5
// pods, b: 3)"), or with minCount below the gang's size "placed 6 of 8 pods
// (minCount 5) in …; the others join when there is room"; a segmented
// gang's segments follow ("…; segments in <key>: 0-3 in a, 4-7 in b").
func PlacedMessage(g *placement.Gang, d *placement.Decision) string {
	at := Where(d.TopologyKey, d.Domain)
	if s := d.SpreadSummary(); s != "" {
		at += ", " + s
	}
	if s := d.SegmentSummary(); s != "" {
		at += "; " + s
	}
	if d.FabricHealth != "" {
		at += "; " + d.FabricHealth
	}
	if len(d.Pods) == len(g.Members) {
		return fmt.Sprintf("placed %d pods in %s", len(d.Pods), at)
	}
	return fmt.Sprintf("placed %d of %d pods (minCount %d) in %s; the others join when there is room there",
		len(d.Pods), len(g.Members), g.MinCount, at)
}
