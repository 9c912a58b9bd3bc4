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
// own and the PodGroup's) is allocated, reserved for it (or the PodGroup)
// and usable on that node. Any other pod is skipped and the event says
// why. A tree's leaf whose PodGroup is gone (or replaced) is rolled back,
// as a flat gang's commit is when its PodGroup is gone. A leaf that fails
// (a binding or its condition refused by the API) does not stop the
// others: the errors return joined and the record stays for a retry.
func (c *Committer) finishCommit(ctx context.Context, rec *commitRecord, live *liveCommit) error {
	n := len(rec.Groups)
	var (
		mu      sync.Mutex
		bound   = make([]int, n)
		skipped = make([][]string, n)
		failed  = make([]error, n)
	)
	err := Parallel(ctx, c.cfg.Parallelism, len(rec.Pods), func(ctx context.Context, i int) error {
		g := rec.Pods[i].Group
		if live.pgs[g] == nil {
			return nil // rolled back below
		}
		why, err := c.finishPod(ctx, rec, live, i)
		mu.Lock()
		defer mu.Unlock()
		switch {
		case gate.Stops(err):
			return err
		case err != nil:
			failed[g] = cmp.Or(failed[g], err)
		case why != "":
			skipped[g] = append(skipped[g], fmt.Sprintf("%s: %s", rec.Pods[i].Name, why))
		default:
			bound[g]++
		}
		return nil
	})
	if err != nil {
		return err
	}
	if !slices.ContainsFunc(failed, func(err error) bool { return err != nil }) {
		c.cfg.Metrics.recovery(RecoveryFinished)
	}
	errs := make([]error, n+1)
	err = Parallel(ctx, c.cfg.Parallelism, n, func(ctx context.Context, g int) error {
		if live.pgs[g] == nil || failed[g] != nil {
			errs[g] = failed[g]
			return nil
		}
		err := c.finishGroup(ctx, rec, live.pgs[g], g, bound[g], skipped[g])
		if err != nil && !gate.Stops(err) {
			errs[g] = err
			return nil
		}
		return err
	})
	if err != nil {
		return err
	}
	gone := make([]bool, n)
	for g, pg := range live.pgs {
		gone[g] = pg == nil
	}
	if slices.Contains(gone, true) {
		if errs[n] = c.rollBack(ctx, rec, live, gone); gate.Stops(errs[n]) {
			return errs[n]
		}
	}
	return firstErrors(errs)
}

// finishPod binds record pod i unless it is bound: it returns why it was
// skipped ("" when it is bound), or the API's error.
func (c *Committer) finishPod(ctx context.Context, rec *commitRecord, live *liveCommit, i int) (string, error) {
	p := live.members[i]
	if p != nil && p.Spec.NodeName != "" {
		return "", nil
	}
	if why := c.unbindable(ctx, rec, live, i); why != "" {
		return why, nil
	}
	err := c.bind(ctx, p.Namespace, p.Name, p.UID, rec.Pods[i].Node)
	if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
		return err.Error(), nil
	}
	return "", err
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
	return ""
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
