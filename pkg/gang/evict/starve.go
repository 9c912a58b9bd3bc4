package evict

import (
	"context"
	"fmt"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/klog/v2"

	"github.com/gpufabric/gpufabric/pkg/gang/commit"
	"github.com/gpufabric/gpufabric/pkg/gang/placement"
	"github.com/gpufabric/gpufabric/pkg/gang/placement/index"
	"github.com/gpufabric/gpufabric/pkg/gang/podstate"
	"github.com/gpufabric/gpufabric/pkg/gang/preemption"
	"github.com/gpufabric/gpufabric/pkg/gang/vocab"
)

// reservation is a starving gang's hold on a domain (in memory: a new
// term reserves again on the gang's next refusal).
type reservation struct {
	key string
	// namespace of the gang: a namespace holds at most
	// Config.StarvationReservationsPerNamespace reservations.
	namespace string
	priority  int32
	res       *preemption.Reservation
	nodes     sets.Set[string]
	// shadow: by when the domain is bound to have room (ok=false: never
	// known); refreshed on the owner's attempts.
	shadow   time.Time
	shadowOK bool
}

// starvation tracks how long gangs wait and the reservations of those past
// the bound. Safe for concurrent use.
type starvation struct {
	cfg     *Config
	mu      sync.Mutex
	since   map[string]time.Time
	holding map[string]*reservation
}

func newStarvation(cfg *Config) *starvation {
	return &starvation{cfg: cfg, since: map[string]time.Time{}, holding: map[string]*reservation{}}
}

// waited returns how long a gang has been refused, starting the clock at
// first (seeded from the API's condition, so a restart keeps it).
func (st *starvation) waited(key string, first time.Time) time.Duration {
	st.mu.Lock()
	defer st.mu.Unlock()
	since, ok := st.since[key]
	if !ok {
		since = first
		st.since[key] = since
	}
	return time.Since(since)
}

func (st *starvation) get(key string) *reservation {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.holding[key]
}

// put records r unless its namespace already holds its limit of
// reservations (other gangs'); it returns the reservations held and
// whether r is one of them.
func (st *starvation) put(r *reservation) (int, bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.heldByLocked(r.namespace, r.key) >= st.limit() {
		return len(st.holding), false
	}
	st.holding[r.key] = r
	return len(st.holding), true
}

// heldByLocked counts the reservations of namespace ns but key's. Called
// with st.mu held.
func (st *starvation) heldByLocked(ns, key string) int {
	n := 0
	for k, r := range st.holding {
		if k != key && r.namespace == ns {
			n++
		}
	}
	return n
}

// limit is the reservations one namespace may hold.
func (st *starvation) limit() int { return max(st.cfg.StarvationReservationsPerNamespace, 1) }

// forget ends a gang's wait and reservation; it returns the reservations
// left.
func (st *starvation) forget(key string) int {
	st.mu.Lock()
	defer st.mu.Unlock()
	delete(st.since, key)
	delete(st.holding, key)
	return len(st.holding)
}

func (st *starvation) all() []*reservation {
	st.mu.Lock()
	defer st.mu.Unlock()
	out := make([]*reservation, 0, len(st.holding))
	for _, r := range st.holding {
		out = append(out, r)
	}
	return out
}

// refusedSince is when the API says the gang was first refused: the
// PodGroupInitiallyScheduled=False or PodScheduled=False transition, not
// before the object was created; now when it says nothing. A tree's (its
// root writes no status, as kube-scheduler's) is the earliest
// PodScheduled=False transition of its waiting members, not before its
// root was created.
func refusedSince(a *Attempt) time.Time {
	switch {
	case a.PodGroup != nil:
		if c := meta.FindStatusCondition(a.PodGroup.Status.Conditions, vocab.ConditionInitiallyScheduled); c != nil && c.Status == "False" {
			return latest(c.LastTransitionTime.Time, a.PodGroup.CreationTimestamp.Time)
		}
		return time.Now()
	case a.Root != nil:
		first := time.Now()
		for _, p := range a.Members {
			if t, ok := unschedulableSince(p); ok && t.Before(first) {
				first = t
			}
		}
		return latest(first, a.Root.CreationTimestamp.Time)
	}
	if t, ok := unschedulableSince(a.Pod); ok {
		return latest(t, a.Pod.CreationTimestamp.Time)
	}
	return time.Now()
}

// unschedulableSince is when p's PodScheduled went False.
func unschedulableSince(p *v1.Pod) (time.Time, bool) {
	for _, c := range p.Status.Conditions {
		if c.Type == v1.PodScheduled && c.Status == v1.ConditionFalse {
			return c.LastTransitionTime.Time, true
		}
	}
	return time.Time{}, false
}

func latest(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// reserve gives a gang or a tree (req's) past the starvation bound the
// domain closest to fitting it, or refreshes the one it holds; it returns
// a sentence for the refusal message.
func (st *starvation) reserve(ctx context.Context, a *Attempt, req preemption.Request, in index.SnapshotInput) (string, error) {
	if st.cfg.StarvationBound <= 0 {
		return "", nil
	}
	waited := st.waited(a.Key, refusedSince(a))
	if waited < st.cfg.StarvationBound {
		// Look again when the bound passes, cluster change or not.
		st.cfg.Queue.RetryAfter(a.Key, st.cfg.StarvationBound-waited+100*time.Millisecond)
		return "", nil
	}
	r := st.get(a.Key)
	if r == nil || r.priority != a.Priority {
		_, ns, _ := vocab.SplitKey(a.Key)
		if st.full(ns, a.Key) {
			return fmt.Sprintf("waited %s, over the starvation bound, but holds no domain: other gangs of namespace %s hold its limit of starvation reservations (%d)",
				waited.Round(time.Second), ns, st.limit()), nil
		}
		res, err := closest(ctx, st.cfg.Placement, in, req)
		if err != nil || res == nil {
			return "", err
		}
		r = &reservation{key: a.Key, namespace: ns, priority: a.Priority, res: res, nodes: sets.New(res.Nodes...)}
		n, ok := st.put(r)
		if !ok {
			return "", nil // another gang of the namespace reserved meanwhile
		}
		st.cfg.Metrics.setReservations(n)
		klog.FromContext(ctx).V(2).Info("Reserving a domain for a starving gang", "domain", res.Domain, "key", res.TopologyKey, "waited", waited)
		st.cfg.Report.Event(a.about(), v1.EventTypeNormal, vocab.EventReserved, "Scheduling", fmt.Sprintf(
			"waited %s, over the starvation bound of %s: holding %s (%d devices free, %d needed) against gangs of priority %d or lower that cannot finish before it has room",
			waited.Round(time.Second), st.cfg.StarvationBound, commit.Where(res.TopologyKey, res.Domain), res.Free, res.Need, a.Priority))
	}
	r.shadow, r.shadowOK = preemption.Shadow(time.Now(), r.res.Need, st.freeIn(in, r.nodes), st.releasesIn(r.nodes))
	if !r.shadowOK {
		return fmt.Sprintf("holding %s for this gang (waited %s); what runs there declares no end, so nothing may backfill it",
			commit.Where(r.res.TopologyKey, r.res.Domain), waited.Round(time.Second)), nil
	}
	return fmt.Sprintf("holding %s for this gang (waited %s); gangs that end by %s may backfill it",
		commit.Where(r.res.TopologyKey, r.res.Domain), waited.Round(time.Second), r.shadow.UTC().Format(time.RFC3339)), nil
}

// closest is the domain closest to fitting req's gang or tree.
func closest(ctx context.Context, cfg placement.Config, in index.SnapshotInput, req preemption.Request) (*preemption.Reservation, error) {
	if req.Tree != nil {
		return preemption.ClosestTreeDomain(ctx, cfg, in, req.Tree, 0)
	}
	return preemption.ClosestDomain(ctx, cfg, in, req.Gang, 0)
}

// full reports whether namespace ns holds its limit of reservations,
// not counting key's.
func (st *starvation) full(ns, key string) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.heldByLocked(ns, key) >= st.limit()
}

// freeIn counts the free node-local devices of nodes in the input.
func (st *starvation) freeIn(in index.SnapshotInput, nodes sets.Set[string]) int {
	n := 0
	for node, free := range preemption.FreeDevices(in) {
		if nodes.Has(node) {
			n += free
		}
	}
	return n
}

// releasesIn lists, for the pods running on nodes with
// activeDeadlineSeconds, when their devices come back.
func (st *starvation) releasesIn(nodes sets.Set[string]) []preemption.Release {
	claims, err := st.cfg.Claims.List(labels.Everything())
	if err != nil {
		return nil
	}
	devicesOf := map[types.UID]int{}
	for _, c := range claims {
		if c.Status.Allocation == nil || len(c.Status.ReservedFor) != 1 || c.Status.ReservedFor[0].Resource != "pods" {
			continue
		}
		devicesOf[c.Status.ReservedFor[0].UID] += len(c.Status.Allocation.Devices.Results)
	}
	var out []preemption.Release
	for node := range nodes {
		pods, err := st.cfg.Gangs.NodePods(node)
		if err != nil {
			continue
		}
		for _, p := range pods {
			if podstate.Terminated(p) || devicesOf[p.UID] == 0 || p.Spec.ActiveDeadlineSeconds == nil {
				continue
			}
			end := startOf(p).Add(time.Duration(*p.Spec.ActiveDeadlineSeconds) * time.Second)
			out = append(out, preemption.Release{At: end, Devices: devicesOf[p.UID]})
		}
	}
	return out
}

// runFor is how long a gang declares it runs at most: the largest
// activeDeadlineSeconds of its pods, 0 when one of them has none.
func runFor(pods []*v1.Pod) time.Duration {
	var d time.Duration
	for _, p := range pods {
		if p.Spec.ActiveDeadlineSeconds == nil {
			return 0
		}
		d = max(d, time.Duration(*p.Spec.ActiveDeadlineSeconds)*time.Second)
	}
	return d
}

// reservedNodes are the nodes starving gangs hold against attempt a: those
// of reservations of other gangs of a's priority or higher that a may not
// backfill.
func (st *starvation) reservedNodes(a *Attempt, held sets.Set[string]) {
	for _, r := range st.against(a) {
		held.Insert(r.nodes.UnsortedList()...)
	}
}

// against lists the reservations held against attempt a (reservedNodes).
func (st *starvation) against(a *Attempt) []*reservation {
	now, d := time.Now(), runFor(a.Members)
	var out []*reservation
	for _, r := range st.all() {
		if r.key == a.Key || r.priority < a.Priority || preemption.MayBackfill(now, d, r.shadow, r.shadowOK) {
			continue
		}
		out = append(out, r)
	}
	return out
}
