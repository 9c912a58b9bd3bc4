package commit

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"

	"github.com/gpufabric/gpufabric/pkg/gang/commit/recordwire"
	"github.com/gpufabric/gpufabric/pkg/gang/gate"
	"github.com/gpufabric/gpufabric/pkg/gang/podstate"
	"github.com/gpufabric/gpufabric/pkg/gang/vocab"
)

// RecoverAll finishes or rolls back every half-done commit. It runs before
// the first scheduling attempt of a leadership term, on synced informers;
// every decision is re-checked with live reads before it writes.
//
// Rules: a PodGroup commit is finished when any member its record names is
// bound, else rolled back (RecoverRecord); a tree's commit, when any
// member of any of its leaves is bound. A record that fails validation
// is reported on its PodGroup and removed, never acted on. Then every claim
// reserved for an unbound pod of ours loses that reservation, and its
// allocation when no reservation is left (a gang of one killed before its
// binding). One group's failure is logged and retried by that gang's next
// attempt; it never stops the recovery of the others or the term.
func (c *Committer) RecoverAll(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	records, err := c.listRecords(ctx)
	if err != nil {
		return err
	}
	for _, cm := range records {
		if err := c.RecoverRecord(ctx, cm); err != nil {
			if gate.Stops(err) {
				return err
			}
			logger.Error(err, "Recovering a half-done commit failed; the gang's next attempt retries", "record", klog.KObj(cm))
		}
	}
	c.store.SweepParts(ctx, CommitRecords, c.records.all())
	return c.releaseUnboundPods(ctx)
}

// listRecords lists the commit records live, retrying with backoff until
// it succeeds or ctx is done: scheduling must not start before every record
// is known.
func (c *Committer) listRecords(ctx context.Context) ([]*v1.ConfigMap, error) {
	out, err := c.store.List(ctx, CommitRecords)
	for _, cm := range out {
		c.records.put(cm)
	}
	return out, err
}

// liveCommit is what the API holds for the objects a record names.
type liveCommit struct {
	// pgs[g] is the live PodGroup of record group g; nil: gone or
	// replaced (another UID).
	pgs []*schedulingv1beta1.PodGroup
	// members[i] is the live pod of record pod i when it is a member of
	// its group's PodGroup with the record's UID; gone[i] when no pod of
	// that name and UID exists any more. A pod that exists but is not a
	// member is neither: it is never touched.
	members []*v1.Pod
	gone    []bool
	// claims[i] is the live claim of record claim i with the record's UID.
	claims []*resourceapi.ResourceClaim
}

func (l *liveCommit) anyBound() bool {
	return slices.ContainsFunc(l.members, func(p *v1.Pod) bool { return p != nil && p.Spec.NodeName != "" })
}

// RecoverRecord finishes or rolls back the commit a record describes, then
// deletes the record. A record that does not read whole (a part missing
// or changed), decode or validate is rejected (reported, deleted, never
// acted on). It returns an error only when the API failed (the record
// stays and is retried).
func (c *Committer) RecoverRecord(ctx context.Context, cm *v1.ConfigMap) error {
	rec, err := c.readRecord(ctx, cm)
	if errors.Is(err, errBadRecord) {
		c.store.Reject(ctx, CommitRecords, cm, recordUID(cm), err)
		return c.deleteRecord(ctx, cm, cm.Namespace+"/"+cm.Name)
	}
	if err != nil {
		return err
	}
	return c.recoverRecorded(ctx, cm, rec)
}

// readRecord reads a commit record whole (its parts live) and decodes it;
// an error wrapping errBadRecord says it is invalid.
func (c *Committer) readRecord(ctx context.Context, cm *v1.ConfigMap) (*commitRecord, error) {
	raw, err := c.store.ReadRecord(ctx, cm)
	if err != nil {
		return nil, err
	}
	rec, err := recordwire.Decode(cm.Name, raw)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errBadRecord, err)
	}
	return rec, nil
}

// recoverRecorded finishes or rolls back the commit rec describes (stored
// as cm), then deletes cm. A tree's commit is one: finished when a member
// of any leaf is bound, else rolled back wholly.
func (c *Committer) recoverRecorded(ctx context.Context, cm *v1.ConfigMap, rec *commitRecord) error {
	live, err := c.readCommit(ctx, rec)
	if err != nil {
		return err
	}
	if live.anyBound() {
		err = c.finishCommit(ctx, rec, live)
	} else {
		err = c.rollBack(ctx, rec, live, nil)
	}
	if err != nil {
		return err
	}
	return c.deleteRecord(ctx, cm, rec.Root.Key())
}

// readCommit reads the record's PodGroups, pods and claims live (each
// kind in parallel) and keeps only what belongs to the commit.
func (c *Committer) readCommit(ctx context.Context, rec *commitRecord) (*liveCommit, error) {
	ns := rec.Root.Namespace
	live := &liveCommit{pgs: make([]*schedulingv1beta1.PodGroup, len(rec.Groups)), members: make([]*v1.Pod, len(rec.Pods)),
		gone: make([]bool, len(rec.Pods)), claims: make([]*resourceapi.ResourceClaim, len(rec.Claims))}
	err := Parallel(ctx, c.cfg.Parallelism, len(rec.Groups), func(ctx context.Context, i int) error {
		g := rec.Groups[i]
		pg, err := c.cfg.Client.SchedulingV1beta1().PodGroups(g.Namespace).Get(ctx, g.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			return fmt.Errorf("get podgroup %s/%s: %w", g.Namespace, g.Name, err)
		case pg.UID == g.UID:
			live.pgs[i] = pg
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	err = Parallel(ctx, c.cfg.Parallelism, len(rec.Pods), func(ctx context.Context, i int) error {
		p, err := c.cfg.Client.CoreV1().Pods(ns).Get(ctx, rec.Pods[i].Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			live.gone[i] = true
		case err != nil:
			return fmt.Errorf("get pod %s/%s: %w", ns, rec.Pods[i].Name, err)
		case p.UID != rec.Pods[i].UID:
			live.gone[i] = true
		case isMember(p, live.pgs[rec.Pods[i].Group]):
			live.members[i] = p
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	err = Parallel(ctx, c.cfg.Parallelism, len(rec.Claims), func(ctx context.Context, i int) error {
		rc, err := c.cfg.Client.ResourceV1().ResourceClaims(ns).Get(ctx, rec.Claims[i].Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			return fmt.Errorf("get claim %s/%s: %w", ns, rec.Claims[i].Name, err)
		case rc.UID == rec.Claims[i].UID:
			live.claims[i] = rc
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return live, nil
}

// rollBack removes the commit's reservations and the allocations it made,
// of every group (only nil) or of the groups only names (a finished tree's
// leaves whose PodGroup is gone or none of whose pods could be bound).
// Rules: only reservations of such a group's PodGroup (on the claims the
// record reserves for it) and of its record pods that are unbound members
// (or gone) are removed; an allocation is cleared only when no
// reservation is left and it is exactly the one the record says the
// commit wrote. A claim that fails does not stop the others; the errors
// return joined (the record stays).
func (c *Committer) rollBack(ctx context.Context, rec *commitRecord, live *liveCommit, only []bool) error {
	rolled := func(g int) bool { return only == nil || only[g] }
	pods := map[types.UID]bool{}
	names := map[string]bool{} // of the pods, for a partial roll-back
	for i, p := range rec.Pods {
		if rolled(p.Group) && (live.gone[i] || live.members[i] != nil) {
			pods[p.UID] = true
			if only != nil {
				names[p.Name] = true
			}
		}
	}
	var flat []types.UID // a flat record's PodGroup, on every claim
	if !rec.Tree() && rolled(0) {
		flat = []types.UID{rec.Groups[0].UID}
	}
	var released atomic.Int32
	errs := make([]error, len(rec.Claims))
	err := Parallel(ctx, c.cfg.Parallelism, len(rec.Claims), func(ctx context.Context, i int) error {
		rc, rcl := live.claims[i], rec.Claims[i]
		groups := flat
		for _, g := range rcl.Groups {
			if rolled(g) {
				groups = append(groups, rec.Groups[g].UID)
			}
		}
		if rc == nil || (only != nil && len(groups) == 0 && !slices.ContainsFunc(rcl.Pods, func(name string) bool { return names[name] })) {
			return nil // gone, or nothing of a rolled-back group's
		}
		drop := func(uid types.UID) bool { return pods[uid] || slices.Contains(groups, uid) }
		fp := rcl.Allocation
		changed, err := c.releaseClaim(ctx, rc.Namespace, rc.Name, rc.UID, drop, func(a *resourceapi.AllocationResult) bool {
			return fp != "" && AllocationFingerprint(a) == fp
		})
		if changed {
			released.Add(1)
		}
		if err != nil && !gate.Stops(err) {
			errs[i] = err
			return nil // the others are released all the same
		}
		return err
	})
	if err != nil {
		return err
	}
	if err := firstErrors(errs); err != nil {
		return err
	}
	c.reportRolledBack(ctx, rec, live, only, int(released.Load()))
	return nil
}

// reportRolledBack counts, logs and reports a roll-back: an event on each
// rolled-back group's PodGroup that still exists (none for the gone
// leaves of a finished tree).
func (c *Committer) reportRolledBack(ctx context.Context, rec *commitRecord, live *liveCommit, only []bool, released int) {
	logger := klog.FromContext(ctx)
	if only != nil {
		logger.Info("Rolled back the leaves of a finished commit that are gone or could not be bound", "root", rec.Root.String(), "claimsReleased", released)
		return
	}
	c.cfg.Metrics.recovery(RecoveryRolledBack)
	if rec.Tree() {
		logger.Info("Rolled back a half-done commit", "root", rec.Root.String(), "groups", len(rec.Groups), "claimsReleased", released)
	} else {
		logger.Info("Rolled back a half-done commit", "podgroup", klog.KRef(rec.Root.Namespace, rec.Root.Name), "domain", rec.Groups[0].Domain, "claimsReleased", released)
	}
	for g, pg := range live.pgs {
		if pg == nil {
			continue
		}
		what := "a half-done commit"
		if rec.Tree() {
			what += " of " + rec.Root.String()
		}
		c.cfg.Report.Event(pg, v1.EventTypeNormal, vocab.EventCommitRolledBack, "Recovering",
			fmt.Sprintf("%s to %s was rolled back: %d of %d claims released, no pod was bound", what, Where(rec.Groups[g].TopologyKey, rec.Groups[g].Domain), released, len(rec.Claims)))
	}
}

// firstErrors joins the non-nil errors of errs: the first eight, and how
// many more.
func firstErrors(errs []error) error {
	var p Problems
	for _, err := range errs {
		if err != nil {
			p = append(p, err)
		}
	}
	return p.Err()
}

// ReleaseClaim removes the reservations of consumers from a claim with the
// given UID, and its allocation when no reservation is left and clearAlloc
// accepts it. Live read, conflict retries. It reports whether it wrote.
func (c *Committer) ReleaseClaim(ctx context.Context, namespace, name string, uid types.UID, consumers map[types.UID]bool, clearAlloc func(*resourceapi.AllocationResult) bool) (bool, error) {
	return c.releaseClaim(ctx, namespace, name, uid, func(u types.UID) bool { return consumers[u] }, clearAlloc)
}

// releaseClaim is ReleaseClaim for the consumers drop accepts.
func (c *Committer) releaseClaim(ctx context.Context, namespace, name string, uid types.UID, drop func(types.UID) bool, clearAlloc func(*resourceapi.AllocationResult) bool) (bool, error) {
	claims := c.cfg.Client.ResourceV1().ResourceClaims(namespace)
	changed := false
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		rc, err := claims.Get(ctx, name, metav1.GetOptions{})
		if err != nil || rc.UID != uid {
			return err
		}
		kept := slices.DeleteFunc(slices.Clone(rc.Status.ReservedFor), func(r resourceapi.ResourceClaimConsumerReference) bool { return drop(r.UID) })
		clear := len(kept) == 0 && rc.Status.Allocation != nil && clearAlloc(rc.Status.Allocation)
		if len(kept) == len(rc.Status.ReservedFor) && !clear {
			return nil
		}
		if err := c.cfg.Gate.Check(gate.StepClaimStatus, namespace+"/"+name); err != nil {
			return err
		}
		rc = rc.DeepCopy()
		rc.Status.ReservedFor = kept
		if clear {
			rc.Status.Allocation = nil
		}
		if _, err = claims.UpdateStatus(ctx, rc, metav1.UpdateOptions{FieldManager: schedulerName}); err == nil {
			changed = true
		}
		return err
	})
	if apierrors.IsNotFound(err) {
		return changed, nil
	}
	if err != nil {
		return changed, fmt.Errorf("release claim %s/%s: %w", namespace, name, err)
	}
	return changed, nil
}

// releasePodClaims undoes a failed commit of a gang of one: unless the pod
// got bound, its reservations go, and the allocations the commit wrote when
// no reservation is left.
func (c *Committer) releasePodClaims(ctx context.Context, pod *v1.Pod, writes []claimWrite) error {
	p, err := c.cfg.Client.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("get pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	if err == nil && p.UID == pod.UID && p.Spec.NodeName != "" {
		return nil // the binding went through: the commit is complete
	}
	for _, w := range writes {
		ours := func(a *resourceapi.AllocationResult) bool {
			return w.alloc != nil && AllocationFingerprint(a) == AllocationFingerprint(w.alloc)
		}
		if _, err := c.ReleaseClaim(ctx, pod.Namespace, w.claim.Name, w.claim.UID, map[types.UID]bool{pod.UID: true}, ours); err != nil {
			return err
		}
	}
	return nil
}

// releaseUnboundPods drops the reservations of claims held for unbound pods
// of ours: no commit of ours is in flight while it runs. Only this
// scheduler reserves claims for pods with its schedulerName. A claim that
// fails is logged and left for the next term.
func (c *Committer) releaseUnboundPods(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	claims, err := c.cfg.Claims.List(labels.Everything())
	if err != nil {
		return fmt.Errorf("list claims: %w", err)
	}
	anyAlloc := func(*resourceapi.AllocationResult) bool { return true }
	for _, rc := range claims {
		if rc.Status.Allocation == nil {
			continue
		}
		for _, r := range rc.Status.ReservedFor {
			if r.APIGroup != "" || r.Resource != "pods" {
				continue
			}
			if p, err := c.cfg.Pods.Pods(rc.Namespace).Get(r.Name); err != nil || p.UID != r.UID || !podstate.Ours(p) || p.Spec.NodeName != "" {
				continue
			}
			live, err := c.cfg.Client.CoreV1().Pods(rc.Namespace).Get(ctx, r.Name, metav1.GetOptions{})
			if err != nil || live.UID != r.UID || live.Spec.NodeName != "" {
				continue // gone (kube-controller-manager cleans up) or bound
			}
			logger.Info("Releasing claim reserved for an unbound pod", "claim", klog.KObj(rc), "pod", klog.KObj(live))
			if _, err := c.ReleaseClaim(ctx, rc.Namespace, rc.Name, rc.UID, map[types.UID]bool{r.UID: true}, anyAlloc); err != nil {
				if gate.Stops(err) {
					return err
				}
				logger.Error(err, "Releasing a claim of an unbound pod failed", "claim", klog.KObj(rc))
			}
		}
	}
	return nil
}
