package scheduler

import (
	"cmp"
	"context"
	"fmt"
	"github.com/gpufabric/gpufabric/pkg/gang/gate"
	"github.com/gpufabric/gpufabric/pkg/gang/vocab"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	v1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/gpufabric/gpufabric/pkg/topology"
)

// Double allocation repair. Another scheduler on the same cluster
// (kube-scheduler placing plain-claim pods) allocates from its own view:
// between one scheduler's claim write and the other's informer seeing it,
// both can pick the same device for different claims. The plugin prepares
// such a device for the first claim only, so the other claim's pod would
// wait in ContainerCreating forever. The repairer finds every device of
// driver gpufabric.dev allocated to two claims (fabric-domain channels
// included), keeps one claim, and frees the others: their pods are
// evicted with an event (their controllers create them again, and they are
// scheduled anew), and a PodGroup's shared claim is released once its
// members are gone.
//
// Which claim is kept: one whose consumer pods have started (the plugin
// prepared it), else one of a gang (a PodGroup's shared claim or a
// member's: evicting a member leaves the whole gang short, while a plain
// pod's controller simply creates it again), else the one allocated first
// (allocationTimestamp when both have it, else the order this scheduler
// saw them allocated), else the smaller UID. A double allocation is acted on only after it has
// lasted repairGrace, so a write in flight is never mistaken for one.

// repairGrace is how long a double allocation must last before repair.
const repairGrace = 2 * time.Second

// deviceKey identifies one device.
type deviceKey struct{ driver, pool, device string }

func (d deviceKey) String() string { return d.driver + "/" + d.pool + "/" + d.device }

// allocIndex maps devices of driver gpufabric.dev to the claims allocated
// them. Safe for concurrent use.
type allocIndex struct {
	mu      sync.Mutex
	byDev   map[deviceKey]map[types.UID]bool
	byClaim map[types.UID][]deviceKey
	seen    map[types.UID]time.Time // first seen allocated
}

func newAllocIndex() *allocIndex {
	return &allocIndex{byDev: map[deviceKey]map[types.UID]bool{}, byClaim: map[types.UID][]deviceKey{}, seen: map[types.UID]time.Time{}}
}

// set records a claim's allocated devices (none: deallocated or deleted).
// It returns the devices now held by more than one claim, and the other
// claims still holding a device this claim gave up: another scheduler's
// allocated-device set has just forgotten those devices (hold.go).
func (x *allocIndex) set(uid types.UID, devs []deviceKey, now time.Time) (dup []deviceKey, orphans []types.UID) {
	x.mu.Lock()
	defer x.mu.Unlock()
	gone := x.byClaim[uid]
	for _, d := range gone {
		delete(x.byDev[d], uid)
		if len(x.byDev[d]) == 0 {
			delete(x.byDev, d)
		}
	}
	gone = slices.DeleteFunc(slices.Clone(gone), func(d deviceKey) bool { return slices.Contains(devs, d) })
	orphans = x.holdersLocked(gone)
	if len(devs) == 0 {
		delete(x.byClaim, uid)
		delete(x.seen, uid)
		return nil, orphans
	}
	if _, ok := x.seen[uid]; !ok || x.byClaim[uid] == nil {
		x.seen[uid] = now
	}
	x.byClaim[uid] = devs
	for _, d := range devs {
		if x.byDev[d] == nil {
			x.byDev[d] = map[types.UID]bool{}
		}
		x.byDev[d][uid] = true
		if len(x.byDev[d]) > 1 {
			dup = append(dup, d)
		}
	}
	return dup, orphans
}

// holdersOf returns the claims holding any of devs, in UID order.
func (x *allocIndex) holdersOf(devs []deviceKey) []types.UID {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.holdersLocked(devs)
}

func (x *allocIndex) holdersLocked(devs []deviceKey) []types.UID {
	var out []types.UID
	for _, d := range devs {
		for uid := range x.byDev[d] {
			if !slices.Contains(out, uid) {
				out = append(out, uid)
			}
		}
	}
	slices.Sort(out)
	return out
}

// allocated reports whether a claim holds devices of the index.
func (x *allocIndex) allocated(uid types.UID) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	return len(x.byClaim[uid]) > 0
}

// holders returns the claims holding a device, and when each was first seen.
func (x *allocIndex) holders(d deviceKey) map[types.UID]time.Time {
	x.mu.Lock()
	defer x.mu.Unlock()
	out := map[types.UID]time.Time{}
	for uid := range x.byDev[d] {
		out[uid] = x.seen[uid]
	}
	return out
}

// allocatedDevices lists the gpufabric.dev devices of a claim's allocation
// (admin-access results share devices by design and are left out).
func allocatedDevices(c *resourceapi.ResourceClaim) []deviceKey {
	if c == nil || c.Status.Allocation == nil {
		return nil
	}
	var out []deviceKey
	for _, r := range c.Status.Allocation.Devices.Results {
		if r.Driver == topology.DriverName && !ptr.Deref(r.AdminAccess, false) {
			out = append(out, deviceKey{r.Driver, r.Pool, r.Device})
		}
	}
	return out
}

// repairer frees devices allocated twice; it runs while this replica leads.
type repairer struct {
	s     *Scheduler
	index *allocIndex
	queue workqueue.TypedRateLimitingInterface[deviceKey]
	uids  map[types.UID]string // claim UID -> namespace/name
	holds *holdSet
	mu    sync.Mutex
	// synced is set once the informer has delivered the existing claims:
	// those are "seen" at the zero time, so that their order after a
	// restart does not depend on the informer's order.
	synced atomic.Bool
}

func newRepairer(s *Scheduler) *repairer {
	return &repairer{
		s:     s,
		index: newAllocIndex(),
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[deviceKey](),
			workqueue.TypedRateLimitingQueueConfig[deviceKey]{Name: "double-allocations"}),
		uids:  map[types.UID]string{},
		holds: newHoldSet(),
	}
}

// watch feeds the index from the claim informer.
func (r *repairer) watch(inf cache.SharedIndexInformer) error {
	_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { r.claimChanged(nil, obj) },
		UpdateFunc: r.claimChanged,
		DeleteFunc: func(obj any) { r.claimChanged(obj, nil) },
	})
	if err != nil {
		return fmt.Errorf("watch claims for double allocations: %w", err)
	}
	return nil
}

// claimChanged handles one claim event (obj nil: deleted).
func (r *repairer) claimChanged(oldObj, obj any) {
	old, _ := tombstone[*resourceapi.ResourceClaim](oldObj)
	c, _ := tombstone[*resourceapi.ResourceClaim](obj)
	if c == nil && old == nil {
		return
	}
	if h := cmp.Or(c, old); r.s.isHold(h) {
		r.holdChanged(old, c)
		return
	}
	var devs []deviceKey
	var uid types.UID
	now := time.Now()
	if c != nil {
		uid, devs = c.UID, allocatedDevices(c)
		r.mu.Lock()
		r.uids[c.UID] = c.Namespace + "/" + c.Name
		r.mu.Unlock()
		if !r.synced.Load() {
			now = time.Time{}
		}
	} else {
		uid = old.UID
		r.mu.Lock()
		delete(r.uids, old.UID)
		r.mu.Unlock()
	}
	dup, orphans := r.index.set(uid, devs, now)
	for _, d := range dup {
		r.queue.AddAfter(d, repairGrace)
	}
	r.reassert(orphans)
	if len(devs) == 0 {
		r.targetGone(uid)
	}
}

// run repairs queued devices until ctx is done. Call it after the claim
// informer has synced.
func (r *repairer) run(ctx context.Context) {
	r.synced.Store(true)
	go r.runHolds(ctx)
	go func() {
		<-ctx.Done()
		r.queue.ShutDown()
	}()
	for {
		d, quit := r.queue.Get()
		if quit {
			return
		}
		err := r.repair(ctx, d)
		if err != nil && !gate.Stops(err) && ctx.Err() == nil {
			klog.FromContext(ctx).Error(err, "Repairing a device allocated twice, will retry", "device", d.String())
			r.queue.AddRateLimited(d)
		} else {
			r.queue.Forget(d)
		}
		r.queue.Done(d)
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
func (r *repairer) repair(ctx context.Context, d deviceKey) error {
	var uses []*claimUse
	for uid, seen := range r.index.holders(d) {
		r.mu.Lock()
		key := r.uids[uid]
		r.mu.Unlock()
		ns, name, _ := strings.Cut(key, "/")
		c, err := r.s.claims.ResourceClaims(ns).Get(name)
		if err != nil || c.UID != uid || !slices.Contains(allocatedDevices(c), d) {
			continue
		}
		uses = append(uses, r.use(c, seen))
	}
	if len(uses) < 2 {
		return nil
	}
	keep, lose := chooseKeeper(uses)
	for _, u := range lose {
		if err := r.free(ctx, d, u, keep); err != nil {
			return err
		}
	}
	return nil
}

// use describes a claim's consumers.
func (r *repairer) use(c *resourceapi.ResourceClaim, seen time.Time) *claimUse {
	u := &claimUse{claim: c, seen: seen}
	for _, ref := range c.Status.ReservedFor {
		var pods []*v1.Pod
		switch {
		case ref.APIGroup == "" && ref.Resource == "pods":
			if p, err := r.s.pods.Pods(c.Namespace).Get(ref.Name); err == nil && p.UID == ref.UID {
				pods = []*v1.Pod{p}
			}
		case ref.Resource == "podgroups":
			objs, _ := r.s.inf.pods.GetIndexer().ByIndex(podGroupIndex, c.Namespace+"/"+ref.Name)
			for _, o := range objs {
				if p, ok := o.(*v1.Pod); ok && p.Spec.NodeName != "" {
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

// chooseKeeper picks the claim that keeps a device (see the rules at the
// top of this file); pure.
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
func (r *repairer) free(ctx context.Context, d deviceKey, u, keep *claimUse) error {
	c := u.claim
	why := fmt.Sprintf("device %s is allocated to claim %s and to claim %s/%s, which keeps it (%s)",
		d, c.Name, keep.claim.Namespace, keep.claim.Name, keptBecause(keep, u))
	klog.FromContext(ctx).Info("Freeing a device allocated twice", "device", d.String(), "claim", klog.KObj(c), "kept", klog.KObj(keep.claim), "pods", len(u.pods))
	for _, p := range u.pods {
		if err := r.evict(ctx, p, why); err != nil {
			return err
		}
	}
	group := slices.ContainsFunc(c.Status.ReservedFor, func(ref resourceapi.ResourceClaimConsumerReference) bool { return ref.Resource == "podgroups" })
	if !group && len(c.Status.ReservedFor) > 0 {
		r.s.cfg.Metrics.doubleAllocation("evicted")
		return nil // kube-controller-manager releases it once its pods are gone
	}
	consumers := map[types.UID]bool{}
	for _, ref := range c.Status.ReservedFor {
		if ref.Resource == "podgroups" {
			consumers[ref.UID] = true
		}
	}
	if _, err := r.s.releaseClaim(ctx, c.Namespace, c.Name, c.UID, consumers, func(*resourceapi.AllocationResult) bool { return true }); err != nil {
		return err
	}
	r.s.cfg.Metrics.doubleAllocation("released")
	r.s.report.Event(c, v1.EventTypeWarning, vocab.EventDeviceDoubleBooked, "Repairing", why+"; allocation released")
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
func (r *repairer) evict(ctx context.Context, p *v1.Pod, why string) error {
	if p.DeletionTimestamp != nil {
		return nil
	}
	if err := r.s.gate.Check(gate.StepEvict, p.Namespace+"/"+p.Name); err != nil {
		return err
	}
	opts := &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &p.UID}}
	if !started(p) {
		opts.GracePeriodSeconds = ptr.To[int64](0)
	}
	ev := &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: p.Name}, DeleteOptions: opts}
	err := r.s.cfg.Client.CoreV1().Pods(p.Namespace).EvictV1(ctx, ev)
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil
	}
	if err != nil {
		r.s.report.Event(p, v1.EventTypeWarning, vocab.EventDeviceDoubleBooked, "Evicting", why+"; eviction failed, retrying: "+err.Error())
		return fmt.Errorf("evict pod %s/%s: %w", p.Namespace, p.Name, err)
	}
	r.s.report.Event(p, v1.EventTypeWarning, vocab.EventDeviceDoubleBooked, "Evicting", why+"; pod evicted to be scheduled again")
	return nil
}
