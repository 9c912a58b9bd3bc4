package commit

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/klog/v2"

	"github.com/gpufabric/gpufabric/pkg/gang/gate"
	"github.com/gpufabric/gpufabric/pkg/gang/placement"
	"github.com/gpufabric/gpufabric/pkg/gang/vocab"
)

// finishCommit binds the record's members that are still unbound (in
// parallel) and sets each group's condition. Every claim write precedes
// the first binding, so the claims are complete once any member (of any
// leaf) is bound.
//
// Rules: a pod is bound only when it is a live member of its group's
// PodGroup with the record's UID and our schedulerName, unbound, not
// terminating and not gated, its node exists, and every claim it uses (its
// own, the PodGroup's, and the special claim of its extended resources,
// which its status must name) is allocated, reserved for it (or the
// PodGroup) and usable on that node. Any other pod is skipped and the
// event says why. A tree's leaf whose PodGroup is gone (or replaced) is
// rolled back, as a flat gang's commit is when its PodGroup is gone, and
// so is a leaf none of whose pods could be bound (no condition). A leaf
// that fails (a binding or its condition refused by the API) does not
// stop the others: the errors return joined and the record stays for a
// retry.
func (c *Committer) finishCommit(ctx context.Context, rec *commitRecord, live *liveCommit) error {
	n := len(rec.Groups)
	t, err := c.bindRecorded(ctx, rec, live)
	if err != nil {
		return err
	}
	if !slices.ContainsFunc(t.failed, func(err error) bool { return err != nil }) {
		c.cfg.Metrics.recovery(RecoveryFinished)
	}
	// Rolled back: the leaves whose PodGroup is gone, and those none of
	// whose pods could be bound (only in a tree: a flat gang's commit is
	// finished because a member of its one group is bound). A leaf with no
	// pod bound whose binding conflicted is read again at the next
	// recovery instead (the record stays).
	roll := make([]bool, n)
	for g, pg := range live.pgs {
		if pg != nil && t.failed[g] == nil && t.bound[g] == 0 && t.raced[g] {
			t.failed[g] = fmt.Errorf("podgroup %s: no pod bound and a binding conflicted; recovered again", pg.Name)
		}
		roll[g] = pg == nil || (t.failed[g] == nil && t.bound[g] == 0)
	}
	errs := make([]error, n+1)
	err = Parallel(ctx, c.cfg.Parallelism, n, func(ctx context.Context, g int) error {
		switch {
		case live.pgs[g] == nil:
			return nil
		case t.failed[g] != nil:
			errs[g] = t.failed[g]
			return nil
		case roll[g]:
			c.cfg.Report.Event(live.pgs[g], v1.EventTypeWarning, vocab.EventCommitRolledBack, "Recovering",
				fmt.Sprintf("a half-done commit of %s was finished for its other leaves, but no pod of this one could be bound, so its part was rolled back: %s", rec.Root, strings.Join(t.skipped[g], "; ")))
			return nil
		}
		err := c.finishGroup(ctx, rec, live.pgs[g], g, t.bound[g], t.skipped[g])
		if err != nil && !gate.Stops(err) {
			errs[g] = err
			return nil
		}
		return err
	})
	if err != nil {
		return err
	}
	if slices.Contains(roll, true) {
		if errs[n] = c.rollBack(ctx, rec, live, roll); gate.Stops(errs[n]) {
			return errs[n]
		}
	}
	return firstErrors(errs)
}

// finishTally is what a roll-forward's bindings did, by group.
type finishTally struct {
	bound   []int
	skipped [][]string // "pod: why"
	failed  []error    // the first API error
	raced   []bool     // a binding conflicted: the pod may be bound
}

// bindRecorded binds the record's unbound members of the groups whose
// PodGroup exists (in parallel). An API error is kept for its group and
// stops nothing; only an error that stops the scheduler returns.
func (c *Committer) bindRecorded(ctx context.Context, rec *commitRecord, live *liveCommit) (*finishTally, error) {
	n := len(rec.Groups)
	t := &finishTally{bound: make([]int, n), skipped: make([][]string, n), failed: make([]error, n), raced: make([]bool, n)}
	var mu sync.Mutex
	err := Parallel(ctx, c.cfg.Parallelism, len(rec.Pods), func(ctx context.Context, i int) error {
		g := rec.Pods[i].Group
		if live.pgs[g] == nil {
			return nil // rolled back
		}
		why, race, err := c.finishPod(ctx, rec, live, i)
		mu.Lock()
		defer mu.Unlock()
		t.raced[g] = t.raced[g] || race
		switch {
		case gate.Stops(err):
			return err
		case err != nil:
			t.failed[g] = cmp.Or(t.failed[g], err)
		case why != "":
			t.skipped[g] = append(t.skipped[g], fmt.Sprintf("%s: %s", rec.Pods[i].Name, why))
		default:
			t.bound[g]++
		}
		return nil
	})
	return t, err
}

// finishPod binds record pod i unless it is bound: it returns why it was
// skipped ("" when it is bound; raced when its binding conflicted), or the
// API's error.
func (c *Committer) finishPod(ctx context.Context, rec *commitRecord, live *liveCommit, i int) (why string, raced bool, err error) {
	p := live.members[i]
	if p != nil && p.Spec.NodeName != "" {
		return "", false, nil
	}
	if why := c.unbindable(ctx, rec, live, i); why != "" {
		return why, false, nil
	}
	err = c.bind(ctx, p.Namespace, p.Name, p.UID, rec.Pods[i].Node)
	if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
		return err.Error(), true, nil
	}
	return "", false, err
}

// finishGroup reports a finished commit of group g (PodGroup pg) and sets
// its condition.
func (c *Committer) finishGroup(ctx context.Context, rec *commitRecord, pg *schedulingv1beta1.PodGroup, g, bound int, skipped []string) error {
	group := rec.Groups[g]
	msg := fmt.Sprintf("placed %d pods in %s (commit finished by recovery)", bound, Where(group.TopologyKey, group.Domain))
	klog.FromContext(ctx).Info("Finished a half-done commit", "podgroup", klog.KObj(pg), "bound", bound, "skipped", len(skipped))
	if len(skipped) > 0 {
		pods := 0
		for _, p := range rec.Pods {
			if p.Group == g {
				pods++
			}
		}
		c.cfg.Report.Event(pg, v1.EventTypeWarning, vocab.EventCommitRecovered, "Recovering",
			fmt.Sprintf("%s; %d of %d pods not bound: %s", msg, len(skipped), pods, strings.Join(skipped, "; ")))
	} else {
		c.cfg.Report.Event(pg, v1.EventTypeNormal, vocab.EventCommitRecovered, "Recovering", msg)
	}
	return c.cfg.Conditions.SetInitiallyScheduled(ctx, pg, metav1.ConditionTrue, vocab.ReasonScheduled, msg)
}

// unbindable says why record pod i must not be bound by recovery, "" when
// it may. Every claim the pod uses (its own and the PodGroup's) is read
// live and must be allocated for that node and reserved for it.
func (c *Committer) unbindable(ctx context.Context, rec *commitRecord, live *liveCommit, i int) string {
	rp := rec.Pods[i]
	p := live.members[i]
	pg := live.pgs[rp.Group]
	switch {
	case live.gone[i]:
		return "pod is gone"
	case p == nil:
		return fmt.Sprintf("not a member of podgroup %s with schedulerName %s", rec.Groups[rp.Group].Name, schedulerName)
	case p.DeletionTimestamp != nil:
		return "pod is terminating"
	case len(p.Spec.SchedulingGates) > 0:
		return "pod has scheduling gates"
	}
	node, err := c.cfg.Nodes.Get(rp.Node)
	if err != nil {
		return fmt.Sprintf("node %s does not exist", rp.Node)
	}
	group := pg.DeepCopy()
	group.Spec.SchedulingPolicy.Gang = nil
	g, err := placement.NewGang(group, []*v1.Pod{p}, func(ns, name string) (*resourceapi.ResourceClaim, error) {
		return c.cfg.Client.ResourceV1().ResourceClaims(ns).Get(ctx, name, metav1.GetOptions{})
	})
	if err != nil {
		return fmt.Sprintf("its claims cannot be read: %v", err)
	}
	check := func(rc *resourceapi.ResourceClaim, consumer types.UID) string {
		if why := claimUsableOn(rc, consumer, node); why != "" {
			return fmt.Sprintf("claim %s %s", rc.Name, why)
		}
		return ""
	}
	for _, rc := range g.SharedClaims {
		if why := check(rc, pg.UID); why != "" {
			return why
		}
	}
	for _, rc := range g.Members[0].Claims {
		if why := check(rc, p.UID); why != "" {
			return why
		}
	}
	return extendedUnbindable(ctx, c, rec, live, i, node)
}

// claimUsableOn says why a claim cannot serve consumer on node, "" when it
// can: it must exist, be allocated, reserved for consumer, and its
// allocation's node selector must match the node.
func claimUsableOn(c *resourceapi.ResourceClaim, consumer types.UID, node *v1.Node) string {
	switch {
	case c == nil:
		return "is gone"
	case c.Status.Allocation == nil:
		return "is not allocated"
	case !ReservedFor(c, consumer):
		return "is not reserved for it"
	}
	if sel := c.Status.Allocation.NodeSelector; sel != nil {
		ns, err := nodeaffinity.NewNodeSelector(sel)
		if err != nil {
			return fmt.Sprintf("has an invalid node selector: %v", err)
		}
		if !ns.Match(node) {
			return fmt.Sprintf("is allocated for other nodes than %s", node.Name)
		}
	}
	return ""
}
