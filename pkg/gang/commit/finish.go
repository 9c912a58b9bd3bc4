package commit

import (
	"context"
	"fmt"
	"strings"
	"sync"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/klog/v2"

	"github.com/gpufabric/gpufabric/pkg/gang/placement"
	"github.com/gpufabric/gpufabric/pkg/gang/vocab"
)

// finishCommit binds the record's members that are still unbound (in
// parallel) and sets the condition. Every claim write precedes the first
// binding, so the claims are complete once any member is bound.
//
// Rules: a pod is bound only when it is a live member of the PodGroup with
// the record's UID and our schedulerName, unbound, not terminating and not
// gated, its node exists, and every claim it uses (its own, the
// PodGroup's, and the special claim of its extended resources, which its
// status must name) is allocated, reserved for it (or the PodGroup) and
// usable on that node. Any other pod is skipped and the event says why.
func (c *Committer) finishCommit(ctx context.Context, rec *commitRecord, live *liveCommit) error {
	var (
		mu      sync.Mutex
		skipped []string
		bound   int
	)
	err := Parallel(ctx, c.cfg.Parallelism, len(rec.Pods), func(ctx context.Context, i int) error {
		p := live.members[i]
		if p != nil && p.Spec.NodeName != "" {
			mu.Lock()
			bound++
			mu.Unlock()
			return nil
		}
		why := c.unbindable(ctx, rec, live, i)
		if why == "" {
			err := c.bind(ctx, p.Namespace, p.Name, p.UID, rec.Pods[i].Node)
			switch {
			case err == nil:
				mu.Lock()
				bound++
				mu.Unlock()
				return nil
			case apierrors.IsConflict(err) || apierrors.IsNotFound(err):
				why = err.Error()
			default:
				return err
			}
		}
		mu.Lock()
		skipped = append(skipped, fmt.Sprintf("%s: %s", rec.Pods[i].Name, why))
		mu.Unlock()
		return nil
	})
	if err != nil {
		return err
	}
	c.cfg.Metrics.recovery(RecoveryFinished)
	msg := fmt.Sprintf("placed %d pods in %s (commit finished by recovery)", bound, Where(rec.TopologyKey, rec.Domain))
	klog.FromContext(ctx).Info("Finished a half-done commit", "podgroup", klog.KObj(live.pg), "bound", bound, "skipped", len(skipped))
	if len(skipped) > 0 {
		c.cfg.Report.Event(live.pg, v1.EventTypeWarning, vocab.EventCommitRecovered, "Recovering",
			fmt.Sprintf("%s; %d of %d pods not bound: %s", msg, len(skipped), len(rec.Pods), strings.Join(skipped, "; ")))
	} else {
		c.cfg.Report.Event(live.pg, v1.EventTypeNormal, vocab.EventCommitRecovered, "Recovering", msg)
	}
	return c.cfg.Conditions.SetInitiallyScheduled(ctx, live.pg, metav1.ConditionTrue, vocab.ReasonScheduled, msg)
}

// unbindable says why record pod i must not be bound by recovery, "" when
// it may. Every claim the pod uses (its own and the PodGroup's) is read
// live and must be allocated for that node and reserved for it.
func (c *Committer) unbindable(ctx context.Context, rec *commitRecord, live *liveCommit, i int) string {
	rp := rec.Pods[i]
	p := live.members[i]
	switch {
	case live.gone[i]:
		return "pod is gone"
	case p == nil:
		return fmt.Sprintf("not a member of podgroup %s with schedulerName %s", rec.PodGroup.Name, schedulerName)
	case p.DeletionTimestamp != nil:
		return "pod is terminating"
	case len(p.Spec.SchedulingGates) > 0:
		return "pod has scheduling gates"
	}
	node, err := c.cfg.Nodes.Get(rp.Node)
	if err != nil {
		return fmt.Sprintf("node %s does not exist", rp.Node)
	}
	group := live.pg.DeepCopy()
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
		if why := check(rc, live.pg.UID); why != "" {
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
