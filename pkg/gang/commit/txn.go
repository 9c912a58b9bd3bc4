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

// planWrites lists a flat gang's claim writes (planLeafWrites of its one
// leaf; pg nil for a gang of one).
func planWrites(pg *schedulingv1beta1.PodGroup, g *placement.Gang, d *placement.Decision) []claimWrite {
	return planLeafWrites([]Leaf{{PodGroup: pg, Gang: g, Decision: d}})
}

// planLeafWrites lists a commit's claim writes in protocol order: the
// shared claims of every leaf (reserved for the leaf's PodGroup, or for
// every placed member when the members name the claim themselves:
// Gang.MemberShared), then each placed member's claims (reserved for the
// member), skipping reservations that exist. A claim several members use,
// of one leaf or of several, gets one write that reserves it for all of
// them, as kube-scheduler reserves a claim for each pod sharing it; its
// allocation is the one a leaf's decision holds (doubleAllocated refuses
// a claim two hold).
func planLeafWrites(leaves []Leaf) []claimWrite {
	p := writePlan{allocs: map[string]*resourceapi.AllocationResult{}, at: map[types.UID]int{}}
	for _, l := range leaves {
		for i := range l.Decision.Claims {
			p.allocs[l.Decision.Claims[i].Name] = &l.Decision.Claims[i].Allocation
		}
	}
	members := make([][]placement.Member, len(leaves))
	for i, l := range leaves {
		members[i] = placedMembers(l.Gang, l.Decision)
	}
	for i, l := range leaves {
		if pg := l.PodGroup; pg != nil {
			ref := resourceapi.ResourceClaimConsumerReference{APIGroup: schedulingv1beta1.GroupName, Resource: "podgroups", Name: pg.Name, UID: pg.UID}
			for _, c := range l.Gang.SharedClaims {
				if !l.Gang.MemberShared[c.UID] {
					p.add(c, ref, true)
					continue
				}
				for _, m := range members[i] {
					p.add(c, podRef(m.Pod), true)
				}
			}
		}
	}
	for _, ms := range members {
		for _, m := range ms {
			for _, c := range m.Claims {
				p.add(c, podRef(m.Pod), false)
			}
		}
	}
	return p.out
}

// writePlan collects a commit's claim writes, one per claim.
type writePlan struct {
	allocs map[string]*resourceapi.AllocationResult // by claim name
	out    []claimWrite
	at     map[types.UID]int // claim UID → its write in out
}

// add reserves claim c for consumer in the commit's write of c (a new one
// unless c has one already), unless there is nothing to write: the engine
// left c out, or it is allocated and already reserved for consumer.
func (p *writePlan) add(c *resourceapi.ResourceClaim, consumer resourceapi.ResourceClaimConsumerReference, shared bool) {
	a := p.allocs[c.Name]
	if a == nil && (c.Status.Allocation == nil || ReservedFor(c, consumer.UID)) {
		return // the engine left it out, or nothing to add
	}
	if i, ok := p.at[c.UID]; ok {
		if !slices.ContainsFunc(p.out[i].consumers, func(r resourceapi.ResourceClaimConsumerReference) bool { return r.UID == consumer.UID }) {
			p.out[i].consumers = append(p.out[i].consumers, consumer)
		}
		return
	}
	p.at[c.UID] = len(p.out)
	p.out = append(p.out, claimWrite{claim: c, alloc: a, consumers: []resourceapi.ResourceClaimConsumerReference{consumer}, shared: shared})
}

// placedMembers are the members d places, in gang order; the others are
// left for later (minCount below the gang's size).
func placedMembers(g *placement.Gang, d *placement.Decision) []placement.Member {
	placed := make(map[types.UID]bool, len(d.Pods))
	for _, pp := range d.Pods {
		placed[pp.UID] = true
	}
	var out []placement.Member
	for _, m := range g.Members {
		if placed[m.Pod.UID] {
			out = append(out, m)
		}
	}
	return out
}

func podRef(p *v1.Pod) resourceapi.ResourceClaimConsumerReference {
	return resourceapi.ResourceClaimConsumerReference{Resource: "pods", Name: p.Name, UID: p.UID}
}

// doubleAllocated names a claim the leaves' decisions allocate twice, ""
// when none is: such a commit is refused before anything is written.
func doubleAllocated(leaves []Leaf) string {
	seen := map[string]bool{}
	for _, l := range leaves {
		for _, c := range l.Decision.Claims {
			if seen[c.Name] {
				return c.Namespace + "/" + c.Name
			}
			seen[c.Name] = true
		}
	}
	return ""
}

// ReservedFor reports whether a claim is reserved for the consumer with
// uid.
func ReservedFor(c *resourceapi.ResourceClaim, uid types.UID) bool {
	return slices.ContainsFunc(c.Status.ReservedFor, func(r resourceapi.ResourceClaimConsumerReference) bool { return r.UID == uid })
}

// Txn is one commit, as a transaction: of a flat gang's decision, or of
// the decisions of a tree's placed leaves (BeginTree). Run writes it in
// protocol order, phase by phase over all its leaves, and undoes it when a
// write fails; Undo is that undo (the recovery of this one gang or tree).
// A Txn is run once.
type Txn struct {
	c *Committer
	// root names the record (the zero Root for a gang of one); leaves are
	// the gangs committed, one for a flat gang (PodGroup nil for a gang of
	// one).
	root   Root
	leaves []Leaf
	pods   []placement.PodPlacement // every leaf's, in leaf order
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

// single reports whether the Txn commits a gang of one (no record, no
// condition).
func (t *Txn) single() bool { return t.leaves[0].PodGroup == nil }

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
	klog.FromContext(ctx).V(2).Info("Commit failed, undoing it", "gang", gangKey(t.root, t.leaves), "err", err)
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
// PodGroup or tree commit from its record (finished when a member of any
// leaf is bound, else rolled back; nothing to do without a record), a gang
// of one by releasing its claims unless its pod got bound.
func (t *Txn) Undo(ctx context.Context) error {
	if t.single() {
		return t.c.releasePodClaims(ctx, t.leaves[0].Gang.Members[0].Pod, t.writes)
	}
	cm := t.c.records.get(t.root.UID)
	switch {
	case cm == nil:
		return nil
	case t.record != nil && cm.UID == t.record.UID:
		return t.c.recoverRecorded(ctx, cm, t.rec)
	}
	return t.c.RecoverRecord(ctx, cm) // one an earlier term left (adoptRecord)
}

// writeAll writes a commit phase by phase: record, shared claims, per-pod
// claims, the pods' status.extendedResourceClaimStatus, bindings,
// conditions, clear record; each phase over every leaf. The writes of one
// phase run in parallel (Config.Parallelism); a phase starts only after
// every write of the previous one succeeded, so "a member (of any leaf) is
// bound" still implies "every claim write is done".
func (t *Txn) writeAll(ctx context.Context) error {
	c := t.c
	if name := doubleAllocated(t.leaves); name != "" {
		return fmt.Errorf("the decision allocates claim %s twice; nothing was written", name)
	}
	shared, perPod := splitShared(t.writes)
	var statuses []statusWrite
	for _, l := range t.leaves {
		statuses = append(statuses, extendedStatuses(l.Gang, l.Decision)...)
	}
	phases := []struct {
		name string
		skip bool
		run  func(ctx context.Context) error
	}{
		{phaseRecord, t.single(), func(ctx context.Context) error {
			t.rec = newTreeRecord(t.root, t.leaves, t.writes)
			var err error
			t.record, err = c.createRecord(ctx, t.rec)
			if apierrors.IsAlreadyExists(err) {
				c.adoptRecord(ctx, t.root.UID) // a record this term did not know of: recover it first
			}
			return err
		}},
		{phaseSharedClaims, len(shared) == 0, func(ctx context.Context) error { return t.writeClaims(ctx, shared) }},
		{phasePodClaims, len(perPod) == 0, func(ctx context.Context) error { return t.writeClaims(ctx, perPod) }},
		{phasePodStatus, len(statuses) == 0, func(ctx context.Context) error { return t.writeStatuses(ctx, statuses) }},
		{phaseBind, false, func(ctx context.Context) error {
			return Parallel(ctx, c.cfg.Parallelism, len(t.pods), func(ctx context.Context, i int) error {
				pp := t.pods[i]
				return c.bind(ctx, pp.Namespace, pp.Name, pp.UID, pp.Node)
			})
		}},
		{phaseCondition, t.single(), func(ctx context.Context) error {
			return Parallel(ctx, c.cfg.Parallelism, len(t.leaves), func(ctx context.Context, i int) error {
				l := t.leaves[i]
				return c.cfg.Conditions.SetInitiallyScheduled(ctx, l.PodGroup, metav1.ConditionTrue, vocab.ReasonScheduled, PlacedMessage(l.Gang, l.Decision))
			})
		}},
		{phaseClearRecord, t.single(), func(ctx context.Context) error {
			return c.deleteRecord(ctx, t.record, t.root.Key())
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
	klog.FromContext(ctx).V(2).Info("Committed gang", "pods", len(t.pods), "leaves", len(t.leaves), "claimWrites", len(t.writes), "phases", took)
	return c.cfg.Gate.Check(gate.StepDone, gangKey(t.root, t.leaves))
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
