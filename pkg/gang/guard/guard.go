package guard

import (
	"cmp"
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	resourcelisters "k8s.io/client-go/listers/resource/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/gpufabric/gpufabric/pkg/gang/gate"
	"github.com/gpufabric/gpufabric/pkg/gang/report"
	"github.com/gpufabric/gpufabric/pkg/gang/vocab"
)

// Metrics counts what the guard did; the scheduler's *Metrics implements
// it (nil counts nothing).
type Metrics interface {
	// DoubleAllocation counts one action: "evicted" (a losing claim's
	// pods), "released" (a losing claim) or "held" (a hold made).
	DoubleAllocation(action string)
}

// ClaimReleaser releases a claim that lost a device: the reservations of
// consumers go and, once none is left, its allocation. The scheduler's
// commit protocol implements it.
type ClaimReleaser interface {
	ReleaseClaim(ctx context.Context, namespace, name string, uid types.UID, consumers map[types.UID]bool) error
}

// Config of a Guard: what it reads (the scheduler's listers), how it
// writes (the client, through the gate) and whom it tells.
type Config struct {
	Client kubernetes.Interface
	// RecordNamespace holds the hold claims.
	RecordNamespace string
	// Claims and Pods read the scheduler's informers; GroupPods returns
	// the pods of a PodGroup (the pod informer's index).
	Claims    resourcelisters.ResourceClaimLister
	Pods      corelisters.PodLister
	GroupPods func(namespace, podGroup string) []*v1.Pod
	// Gate is checked before every write; nil lets every write through.
	Gate *gate.Gate
	// Report records the guard's events; nil records nothing.
	Report *report.Reporter
	// Metrics, when set, counts the repairs and holds.
	Metrics Metrics
	// Releaser releases the claims that lose a device.
	Releaser ClaimReleaser
}

// Guard repairs devices allocated twice and holds the devices another
// scheduler forgot; it runs while this replica leads. Safe for concurrent
// use.
type Guard struct {
	cfg   Config
	index *allocIndex
	// queue: the devices allocated twice, each repaired after repairGrace.
	queue workqueue.TypedRateLimitingInterface[deviceKey]
	holds *holdSet
	mu    sync.Mutex
	uids  map[types.UID]string // claim UID -> namespace/name, guarded by mu
	// synced is set once the informer has delivered the existing claims:
	// those are "seen" at the zero time, so that their order after a
	// restart does not depend on the informer's order.
	synced atomic.Bool
}

type noMetrics struct{}

func (noMetrics) DoubleAllocation(string) {}

// New returns a Guard; Watch, then Run it.
func New(cfg Config) *Guard {
	if cfg.Gate == nil {
		cfg.Gate = &gate.Gate{}
	}
	if cfg.Metrics == nil {
		cfg.Metrics = noMetrics{}
	}
	return &Guard{
		cfg:   cfg,
		index: newAllocIndex(),
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[deviceKey](),
			workqueue.TypedRateLimitingQueueConfig[deviceKey]{Name: "double_allocations"}),
		uids:  map[types.UID]string{},
		holds: newHoldSet(),
	}
}

// IsHold reports whether c is one of the scheduler's hold claims (in
// recordNamespace): the scheduler's snapshot and the guard's index leave
// them out.
func IsHold(c *resourceapi.ResourceClaim, recordNamespace string) bool {
	return c != nil && c.Namespace == recordNamespace && strings.HasPrefix(c.Name, vocab.HoldPrefix) && c.Labels[vocab.HoldLabel] != ""
}

// Watch feeds the guard from the claim informer. Call it before the
// informer starts.
func (g *Guard) Watch(inf cache.SharedIndexInformer) error {
	_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { g.claimChanged(nil, obj) },
		UpdateFunc: g.claimChanged,
		DeleteFunc: func(obj any) { g.claimChanged(obj, nil) },
	})
	if err != nil {
		return fmt.Errorf("watch claims for double allocations: %w", err)
	}
	return nil
}

// Run repairs and holds until ctx is done, or until the gate refuses a
// write for good (gate.Stops: the scheduler stops too). Call it once,
// after the claim informer has synced.
func (g *Guard) Run(ctx context.Context) {
	g.synced.Store(true)
	go g.runHolds(ctx)
	g.runRepairs(ctx)
}

// claimChanged handles one claim event (obj nil: deleted).
func (g *Guard) claimChanged(oldObj, obj any) {
	old, _ := tombstone[*resourceapi.ResourceClaim](oldObj)
	c, _ := tombstone[*resourceapi.ResourceClaim](obj)
	if c == nil && old == nil {
		return
	}
	if h := cmp.Or(c, old); IsHold(h, g.cfg.RecordNamespace) {
		g.holdChanged(old, c)
		return
	}
	var devs []deviceKey
	var uid types.UID
	now := time.Now()
	if c != nil {
		uid, devs = c.UID, allocatedDevices(c)
		g.mu.Lock()
		g.uids[c.UID] = c.Namespace + "/" + c.Name
		g.mu.Unlock()
		if !g.synced.Load() {
			now = time.Time{}
		}
	} else {
		uid = old.UID
		g.mu.Lock()
		delete(g.uids, old.UID)
		g.mu.Unlock()
	}
	dup, orphans := g.index.set(uid, devs, now)
	for _, d := range dup {
		g.queue.AddAfter(d, repairGrace)
	}
	g.reassert(orphans)
	if len(devs) == 0 {
		g.targetGone(uid)
	}
}

// claimKey returns the namespace/name of a claim the index holds.
func (g *Guard) claimKey(uid types.UID) string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.uids[uid]
}

// tombstone unwraps a delete event's object.
func tombstone[T any](obj any) (T, bool) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	t, ok := obj.(T)
	return t, ok
}
