package guard

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/gpufabric/gpufabric/pkg/gang/gate"
	"github.com/gpufabric/gpufabric/pkg/gang/vocab"
)

// repairGrace is how long a double allocation must last before repair.
const repairGrace = 2 * time.Second

// runRepairs repairs queued devices until ctx is done or a write is
// refused for good (gate.Stops).
func (g *Guard) runRepairs(ctx context.Context) {
	go func() {
		<-ctx.Done()
		g.queue.ShutDown()
	}()
	for {
		d, quit := g.queue.Get()
		if quit {
			return
		}
		err := g.repair(ctx, d)
		if err != nil && !gate.Stops(err) && ctx.Err() == nil {
			klog.FromContext(ctx).Error(err, "Repairing a device allocated twice, will retry", "device", d.String())
			g.queue.AddRateLimited(d)
		} else {
			g.queue.Forget(d)
		}
		g.queue.Done(d)
		if gate.Stops(err) {
			return
		}
	}
}

// claimUse is one claim holding a device.
type claimUse struct {
	claim   *resourceapi.ResourceClaim
	pods    []*v1.Pod // bound or pending consumer pods
	started bool      // a consumer pod has a started container
	gang    bool      // reserved for a PodGroup or for a member of one
	seen    time.Time
}

// repair keeps one claim of a device and frees the others.
func (g *Guard) repair(ctx context.Context, d deviceKey) error {
	var uses []*claimUse
	for uid, seen := range g.index.holders(d) {
		key := g.claimKey(uid)
		ns, name, _ := strings.Cut(key, "/")
		c, err := g.cfg.Claims.ResourceClaims(ns).Get(name)
		if err != nil || c.UID != uid || !slices.Contains(allocatedDevices(c), d) {
			continue
		}
		uses = append(uses, g.use(c, seen))
	}
	if len(uses) < 2 {
		return nil
	}
	keep, lose := chooseKeeper(uses)
	for _, u := range lose {
		if err := g.free(ctx, d, u, keep); err != nil {
			return err
		}
	}
	return nil
}

// use describes a claim's consumers.
func (g *Guard) use(c *resourceapi.ResourceClaim, seen time.Time) *claimUse {
	u := &claimUse{claim: c, seen: seen}
	for _, ref := range c.Status.ReservedFor {
		var pods []*v1.Pod
		switch {
		case ref.APIGroup == "" && ref.Resource == "pods":
			if p, err := g.cfg.Pods.Pods(c.Namespace).Get(ref.Name); err == nil && p.UID == ref.UID {
				pods = []*v1.Pod{p}
			}
		case ref.Resource == "podgroups":
			for _, p := range g.cfg.GroupPods(c.Namespace, ref.Name) {
				if p.Spec.NodeName != "" {
					pods = append(pods, p)
				}
			}
		}
		u.gang = u.gang || ref.Resource == "podgroups"
		for _, p := range pods {
			u.pods = append(u.pods, p)
			u.started = u.started || started(p)
			u.gang = u.gang || p.Spec.SchedulingGroup != nil
		}
	}
	return u
}

// started reports whether a pod has a container that ran: its claims were
// prepared on its node.
func started(p *v1.Pod) bool {
	for _, cs := range p.Status.ContainerStatuses {
		if cs.State.Running != nil || cs.State.Terminated != nil || cs.LastTerminationState.Terminated != nil {
			return true
		}
	}
	return false
}

// chooseKeeper picks the claim that keeps a device (see the rules in
// doc.go); pure.
func chooseKeeper(uses []*claimUse) (*claimUse, []*claimUse) {
	sorted := slices.Clone(uses)
	sort.SliceStable(sorted, func(i, j int) bool {
		a, b := sorted[i], sorted[j]
		if a.started != b.started {
			return a.started
		}
		if a.gang != b.gang {
			return a.gang
		}
		ta, tb := a.claim.Status.Allocation.AllocationTimestamp, b.claim.Status.Allocation.AllocationTimestamp
		if ta != nil && tb != nil && !ta.Equal(tb) {
			return ta.Before(tb)
		}
		if !a.seen.Equal(b.seen) {
			return a.seen.Before(b.seen)
		}
		return a.claim.UID < b.claim.UID
	})
	return sorted[0], sorted[1:]
}

// free evicts the pods of a claim that lost a device, and releases the
// claim itself when it is reserved for a PodGroup (its members are the
// evicted pods) or for nobody.
func (g *Guard) free(ctx context.Context, d deviceKey, u, keep *claimUse) error {
	c := u.claim
	// Told in c's namespace: the claim that keeps the device is named
	// only when it is of the same namespace.
	keeper := "a claim of another namespace"
	if keep.claim.Namespace == c.Namespace {
		keeper = "claim " + keep.claim.Namespace + "/" + keep.claim.Name
	}
	why := fmt.Sprintf("device %s is allocated to claim %s and to %s, which keeps it (%s)",
		d, c.Name, keeper, keptBecause(keep, u))
	klog.FromContext(ctx).Info("Freeing a device allocated twice", "device", d.String(), "claim", klog.KObj(c), "kept", klog.KObj(keep.claim), "pods", len(u.pods))
	for _, p := range u.pods {
		if err := g.evict(ctx, p, why); err != nil {
			return err
		}
	}
	group := slices.ContainsFunc(c.Status.ReservedFor, func(ref resourceapi.ResourceClaimConsumerReference) bool { return ref.Resource == "podgroups" })
	if !group && len(c.Status.ReservedFor) > 0 {
		g.cfg.Metrics.DoubleAllocation("evicted")
		return nil // kube-controller-manager releases it once its pods are gone
	}
	consumers := map[types.UID]bool{}
	for _, ref := range c.Status.ReservedFor {
		if ref.Resource == "podgroups" {
			consumers[ref.UID] = true
		}
	}
	if err := g.cfg.Releaser.ReleaseClaim(ctx, c.Namespace, c.Name, c.UID, consumers); err != nil {
		return err
	}
	g.cfg.Metrics.DoubleAllocation("released")
	g.cfg.Report.Event(c, v1.EventTypeWarning, vocab.EventDeviceDoubleBooked, "Repairing", why+"; allocation released")
	return nil
}

func keptBecause(keep, lose *claimUse) string {
	switch {
	case keep.started && !lose.started:
		return "its pod runs"
	case keep.started && lose.gang == keep.gang:
		return "both pods run; it was allocated first"
	case keep.gang && !lose.gang:
		return "it belongs to a gang"
	}
	return "it was allocated first"
}

// evict evicts a consumer pod through the Eviction API (PodDisruptionBudgets
// apply): immediately when none of its containers started (it waits in
// ContainerCreating for a device it will never get), else with its grace
// period.
func (g *Guard) evict(ctx context.Context, p *v1.Pod, why string) error {
	if p.DeletionTimestamp != nil {
		return nil
	}
	if err := g.cfg.Gate.Check(gate.StepEvict, p.Namespace+"/"+p.Name); err != nil {
		return err
	}
	opts := &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &p.UID}}
	if !started(p) {
		opts.GracePeriodSeconds = ptr.To[int64](0)
	}
	ev := &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: p.Name}, DeleteOptions: opts}
	err := g.cfg.Client.CoreV1().Pods(p.Namespace).EvictV1(ctx, ev)
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil
	}
	if err != nil {
		g.cfg.Report.Event(p, v1.EventTypeWarning, vocab.EventDeviceDoubleBooked, "Evicting", why+"; eviction failed, retrying: "+err.Error())
		return fmt.Errorf("evict pod %s/%s: %w", p.Namespace, p.Name, err)
	}
	g.cfg.Report.Event(p, v1.EventTypeWarning, vocab.EventDeviceDoubleBooked, "Evicting", why+"; pod evicted to be scheduled again")
	return nil
}
