package guard

import (
	"context"
	"fmt"
	"strings"
	"sync"

	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/gpufabric/gpufabric/pkg/gang/gate"
	"github.com/gpufabric/gpufabric/pkg/gang/vocab"
)

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
			workqueue.TypedRateLimitingQueueConfig[types.UID]{Name: "device_holds"}),
	}
}

// holdChanged tracks a hold claim (c nil: deleted). A hold that loses its
// allocation makes kube-scheduler forget its devices: their other holders
// are re-asserted.
func (g *Guard) holdChanged(old, c *resourceapi.ResourceClaim) {
	h := g.holds
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
		g.reassert(g.index.holdersOf(allocatedDevices(old)))
	}
}

// reassert queues a hold for each claim whose devices another scheduler
// has just forgotten.
func (g *Guard) reassert(uids []types.UID) {
	if len(uids) == 0 {
		return
	}
	g.holds.mu.Lock()
	for _, uid := range uids {
		g.holds.want[uid] = true
	}
	g.holds.mu.Unlock()
	for _, uid := range uids {
		g.holds.queue.Add(uid)
	}
}

// targetGone queues the deletion of the holds of a claim that no longer
// holds devices.
func (g *Guard) targetGone(uid types.UID) {
	g.holds.mu.Lock()
	_, ok := g.holds.byTarget[uid]
	g.holds.mu.Unlock()
	if ok {
		g.holds.queue.Add(uid)
	}
}

// runHolds creates and deletes holds until ctx is done. Call it after the
// claim informer has synced.
func (g *Guard) runHolds(ctx context.Context) {
	q := g.holds.queue
	go func() {
		<-ctx.Done()
		q.ShutDown()
	}()
	for {
		uid, quit := q.Get()
		if quit {
			return
		}
		err := g.syncHolds(ctx, uid)
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
func (g *Guard) syncHolds(ctx context.Context, uid types.UID) error {
	h := g.holds
	key := g.claimKey(uid)
	var target *resourceapi.ResourceClaim
	if ns, name, ok := strings.Cut(key, "/"); ok && g.index.allocated(uid) {
		if c, err := g.cfg.Claims.ResourceClaims(ns).Get(name); err == nil && c.UID == uid && c.Status.Allocation != nil {
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
			if err := g.deleteHold(ctx, name, hu); err != nil {
				return err
			}
		}
		return nil
	}
	if !want {
		return nil
	}
	if err := g.createHold(ctx, target); err != nil {
		h.mu.Lock()
		h.want[uid] = true
		h.mu.Unlock()
		return err
	}
	return nil
}

// createHold writes a hold for target: created, then allocated (the
// allocation is a status write).
func (g *Guard) createHold(ctx context.Context, target *resourceapi.ResourceClaim) error {
	if err := g.cfg.Gate.Fenced(); err != nil {
		return fmt.Errorf("%w: before holding claim %s/%s: %w", gate.ErrFenced, target.Namespace, target.Name, err)
	}
	claims := g.cfg.Client.ResourceV1().ResourceClaims(g.cfg.RecordNamespace)
	hold := &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{
			Namespace:    g.cfg.RecordNamespace,
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
	g.cfg.Metrics.DoubleAllocation("held")
	klog.FromContext(ctx).Info("Holding devices another scheduler forgot", "claim", klog.KObj(target), "hold", klog.KObj(hold),
		"devices", len(allocatedDevices(target)))
	return nil
}

func (g *Guard) deleteHold(ctx context.Context, name string, uid types.UID) error {
	if err := g.cfg.Gate.Fenced(); err != nil {
		return fmt.Errorf("%w: before deleting hold %s: %w", gate.ErrFenced, name, err)
	}
	err := g.cfg.Client.ResourceV1().ResourceClaims(g.cfg.RecordNamespace).Delete(ctx, name,
		metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("delete hold %s: %w", name, err)
	}
	klog.FromContext(ctx).V(2).Info("Deleted a device hold: its claim holds no devices", "hold", klog.KRef(g.cfg.RecordNamespace, name))
	return nil
}
