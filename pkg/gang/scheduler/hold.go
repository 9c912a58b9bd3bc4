package scheduler

import (
	"context"
	"fmt"
	"github.com/gpufabric/gpufabric/pkg/gang/gate"
	"github.com/gpufabric/gpufabric/pkg/gang/vocab"
	"strings"
	"sync"

	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
)

// Device holds. kube-scheduler (v1.37) keeps the devices allocated in the
// cluster as a set fed by claim events: a claim's allocation inserts its
// devices, its deallocation or deletion removes them, whatever other
// claims hold. Once one device has been held by two claims (a race between
// the two schedulers, repaired in repair.go), the loser's deallocation
// makes kube-scheduler forget a device the kept claim still holds, and it
// gives the device away again: repair and re-allocation would loop.
//

// isHold reports whether c is one of this scheduler's hold claims.
func (s *Scheduler) isHold(c *resourceapi.ResourceClaim) bool {
	return c != nil && c.Namespace == s.cfg.RecordNamespace && strings.HasPrefix(c.Name, vocab.HoldPrefix) && c.Labels[vocab.HoldLabel] != ""
}

// holdSet tracks the hold claims by the claim they are for. Safe for
// concurrent use.
type holdSet struct {
	mu sync.Mutex
	// byTarget: held-for claim UID -> hold name -> hold UID.
	byTarget map[types.UID]map[string]types.UID
	// want: held-for claims whose devices another scheduler forgot since
	// their last hold was made.
	want  map[types.UID]bool
	queue workqueue.TypedRateLimitingInterface[types.UID]
}

func newHoldSet() *holdSet {
	return &holdSet{
		byTarget: map[types.UID]map[string]types.UID{},
		want:     map[types.UID]bool{},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[types.UID](),
			workqueue.TypedRateLimitingQueueConfig[types.UID]{Name: "device-holds"}),
	}
}

// holdChanged tracks a hold claim (c nil: deleted). A hold that loses its
// allocation makes kube-scheduler forget its devices: their other holders
// are re-asserted.
func (r *repairer) holdChanged(old, c *resourceapi.ResourceClaim) {
	h := r.holds
	if c != nil {
		target := types.UID(c.Labels[vocab.HoldLabel])
		h.mu.Lock()
		if h.byTarget[target] == nil {
			h.byTarget[target] = map[string]types.UID{}
		}
		h.byTarget[target][c.Name] = c.UID
		h.mu.Unlock()
		h.queue.Add(target) // deleted when its claim is gone
	} else {
		target := types.UID(old.Labels[vocab.HoldLabel])
		h.mu.Lock()
		delete(h.byTarget[target], old.Name)
		if len(h.byTarget[target]) == 0 {
			delete(h.byTarget, target)
		}
		h.mu.Unlock()
	}
	if old != nil && old.Status.Allocation != nil && (c == nil || c.Status.Allocation == nil) {
		r.reassert(r.index.holdersOf(allocatedDevices(old)))
	}
}

// reassert queues a hold for each claim whose devices another scheduler
// has just forgotten.
func (r *repairer) reassert(uids []types.UID) {
	if len(uids) == 0 {
		return
	}
	r.holds.mu.Lock()
	for _, uid := range uids {
		r.holds.want[uid] = true
	}
	r.holds.mu.Unlock()
	for _, uid := range uids {
		r.holds.queue.Add(uid)
	}
}

// targetGone queues the deletion of the holds of a claim that no longer
// holds devices.
func (r *repairer) targetGone(uid types.UID) {
	r.holds.mu.Lock()
	_, ok := r.holds.byTarget[uid]
	r.holds.mu.Unlock()
	if ok {
		r.holds.queue.Add(uid)
	}
}

// runHolds creates and deletes holds until ctx is done. Call it after the
// claim informer has synced.
func (r *repairer) runHolds(ctx context.Context) {
	q := r.holds.queue
	go func() {
		<-ctx.Done()
		q.ShutDown()
	}()
	for {
		uid, quit := q.Get()
		if quit {
			return
		}
		err := r.syncHolds(ctx, uid)
		switch {
		case err != nil && !gate.Stops(err) && ctx.Err() == nil:
			klog.FromContext(ctx).Error(err, "Syncing device holds, will retry", "claimUID", uid)
			q.AddRateLimited(uid)
		default:
			q.Forget(uid)
		}
		q.Done(uid)
		if gate.Stops(err) {
			return
		}
	}
}

// syncHolds makes the holds of one claim right: a new one when its
// devices were forgotten, none once it holds no devices.
func (r *repairer) syncHolds(ctx context.Context, uid types.UID) error {
	h := r.holds
	r.mu.Lock()
	key := r.uids[uid]
	r.mu.Unlock()
	var target *resourceapi.ResourceClaim
	if ns, name, ok := strings.Cut(key, "/"); ok && r.index.allocated(uid) {
		if c, err := r.s.claims.ResourceClaims(ns).Get(name); err == nil && c.UID == uid && c.Status.Allocation != nil {
			target = c
		}
	}
	h.mu.Lock()
	want := h.want[uid]
	delete(h.want, uid)
	holds := make(map[string]types.UID, len(h.byTarget[uid]))
	for name, hu := range h.byTarget[uid] {
		holds[name] = hu
	}
	h.mu.Unlock()
	if target == nil {
		for name, hu := range holds {
			if err := r.deleteHold(ctx, name, hu); err != nil {
				return err
			}
		}
		return nil
	}
	if !want {
		return nil
	}
	if err := r.createHold(ctx, target); err != nil {
		h.mu.Lock()
		h.want[uid] = true
		h.mu.Unlock()
		return err
	}
	return nil
}

// createHold writes a hold for target: created, then allocated (the
// allocation is a status write).
func (r *repairer) createHold(ctx context.Context, target *resourceapi.ResourceClaim) error {
	if err := r.s.gate.Fenced(); err != nil {
		return fmt.Errorf("%w: before holding claim %s/%s: %w", gate.ErrFenced, target.Namespace, target.Name, err)
	}
	claims := r.s.cfg.Client.ResourceV1().ResourceClaims(r.s.cfg.RecordNamespace)
	hold := &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{
			Namespace:    r.s.cfg.RecordNamespace,
			GenerateName: vocab.HoldPrefix,
			Labels:       map[string]string{vocab.HoldLabel: string(target.UID)},
			Annotations:  map[string]string{vocab.HoldForAnnotation: target.Namespace + "/" + target.Name},
		},
		Spec: *target.Spec.DeepCopy(),
	}
	hold, err := claims.Create(ctx, hold, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("create hold for claim %s/%s: %w", target.Namespace, target.Name, err)
	}
	hold.Status.Allocation = target.Status.Allocation.DeepCopy()
	if _, err := claims.UpdateStatus(ctx, hold, metav1.UpdateOptions{}); err != nil {
		// Unallocated, it holds nothing; tracked, it goes with its claim.
		return fmt.Errorf("allocate hold %s for claim %s/%s: %w", hold.Name, target.Namespace, target.Name, err)
	}
	r.s.cfg.Metrics.doubleAllocation("held")
	klog.FromContext(ctx).Info("Holding devices another scheduler forgot", "claim", klog.KObj(target), "hold", klog.KObj(hold),
		"devices", len(allocatedDevices(target)))
	return nil
}

func (r *repairer) deleteHold(ctx context.Context, name string, uid types.UID) error {
	if err := r.s.gate.Fenced(); err != nil {
		return fmt.Errorf("%w: before deleting hold %s: %w", gate.ErrFenced, name, err)
	}
	err := r.s.cfg.Client.ResourceV1().ResourceClaims(r.s.cfg.RecordNamespace).Delete(ctx, name,
		metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("delete hold %s: %w", name, err)
	}
	klog.FromContext(ctx).V(2).Info("Deleted a device hold: its claim holds no devices", "hold", klog.KRef(r.s.cfg.RecordNamespace, name))
	return nil
}
