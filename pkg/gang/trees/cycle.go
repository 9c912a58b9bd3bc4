package trees

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	schedulingv1alpha3 "k8s.io/api/scheduling/v1alpha3"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/klog/v2"

	"github.com/gpufabric/gpufabric/pkg/gang/assume"
	"github.com/gpufabric/gpufabric/pkg/gang/commit"
	"github.com/gpufabric/gpufabric/pkg/gang/evict"
	"github.com/gpufabric/gpufabric/pkg/gang/gate"
	"github.com/gpufabric/gpufabric/pkg/gang/metrics"
	"github.com/gpufabric/gpufabric/pkg/gang/placement"
	"github.com/gpufabric/gpufabric/pkg/gang/placement/index"
	"github.com/gpufabric/gpufabric/pkg/gang/report"
	"github.com/gpufabric/gpufabric/pkg/gang/vocab"
)

// Queue is what a tree's attempt asks of the scheduler's queue.
type Queue interface {
	Cycle() uint64
	Add(key string)
	Done(key string)
	FlushParked()
	Park(key string, cycle uint64) time.Duration
	ParkError(key string, cycle uint64) time.Duration
	Wait(key, namespace string, cycle uint64)
	RetryAfter(key string, d time.Duration)
	RetryConflict(key string) time.Duration
	ParkShort(key string, cycle uint64) time.Duration
}

// Members is what the loop knows of one PodGroup's pods: those waiting
// to be placed, running, gated, whether one was ever bound (the waiting
// ones are late members), and the running ones' nodes.
type Members struct {
	Pending, Running, Gated []*v1.Pod
	AnyBound                bool
	BoundNodes              []string
	// Restarting: the leaf restarts whole and its old members are still
	// going; nothing of its tree is placed until they are gone.
	Restarting bool
	// Previous: after a whole restart, the nodes whose domain the leaf ran
	// in (replace.Replacer.Prefer): the tree's search pins the leaf there
	// first. Stays: why its policy keeps it there when the tree does not
	// fit so ("": it may go wherever the tree fits best).
	Previous []string
	Stays    string
}

// Metrics are the loop's metrics a tree's attempt observes.
type Metrics interface {
	ObservePlacement(seconds float64)
	ObserveAttempt(result string, seconds float64)
	GangPlaced()
	GangRefused(reason string)
	SetAssumed(n int)
}

var _ Metrics = (*metrics.Metrics)(nil)

// Deps is what a Cycle needs; the loop fills it each leadership term.
type Deps struct {
	Reader  *Reader
	Lister  func(namespace, name string) (*schedulingv1alpha3.CompositePodGroup, error)
	Queue   Queue
	Assumed *assume.Cache
	Visible func(*assume.Entry) bool
	// Snapshot is the cluster less the held nodes; Input the same as the
	// snapshot's input, which a preemption plans on.
	Snapshot func(ctx context.Context, held sets.Set[string]) (*index.Snapshot, error)
	Input    func(held sets.Set[string]) (index.SnapshotInput, error)
	Commits  *commit.Committer
	Pipeline *commit.Pipeline
	// Conditions writes the leaves' InitiallyScheduled condition.
	Conditions commit.Conditions
	Report     *report.Reporter
	Metrics    Metrics
	// Members reads a PodGroup's pods; SetPods says why pods wait
	// (PodScheduled=False, bounded, unchanged ones not rewritten);
	// MarkGated says so on gated pods; Pending notes a gang's refusal
	// reason for the pending_gangs metric.
	Members  func(pg *schedulingv1beta1.PodGroup) (Members, error)
	SetPods  func(ctx context.Context, pods []*v1.Pod, reason, message string)
	Pending  func(key, reason string)
	GetClaim placement.ClaimGetter
	// Prepare pins a leaf's members to their volumes' nodes and gives them
	// their extended resources' claims; Forget and Done end a gang's
	// attempts (the loop's and the evict room's).
	Prepare func(ctx context.Context, g *placement.Gang) error
	Forget  func(key string)
	Done    func(ctx context.Context, key string) error
	// Evictor is the evict room (nil: no nodes held, no preemption);
	// Priorities resolves a tree's effective priority (nil: 0).
	// DisablePreemption is the scheduler's flag.
	Evictor           Evictor
	Priorities        Priorities
	DisablePreemption bool
	// Placement and PlacementTime are the engine's config and time budget;
	// PlaceCalls bounds a tree's search (composite.Options).
	Placement     placement.Config
	PlacementTime time.Duration
	PlaceCalls    int
}

// Cycle runs the attempts of CompositePodGroup trees: read the tree,
// check it is ready, build each leaf PodGroup's gang, place the tree as
// one decision (pkg/gang/composite) and commit its leaves as one
// transaction (commit.Committer.BeginTree), or refuse it.
type Cycle struct{ d Deps }

// NewCycle returns the tree attempts of one leadership term.
func NewCycle(d Deps) *Cycle { return &Cycle{d: d} }

// leafState is what the informers show of one leaf PodGroup.
type leafState struct {
	pg *schedulingv1beta1.PodGroup
	ms Members
	// gang is the leaf's gang of this attempt (nil: none built).
	gang *placement.Gang
}

// Run runs one attempt of the tree key; handedOff: its commit went to the
// pipeline, which marks the key done.
func (c *Cycle) Run(ctx context.Context, key string) (handedOff bool, err error) {
	cycle, begin := c.d.Queue.Cycle(), time.Now()
	root, done, err := c.root(ctx, key, cycle)
	if done || err != nil {
		return false, err
	}
	ctx = klog.NewContext(ctx, klog.LoggerWithValues(klog.FromContext(ctx), "tree", key))
	a := &attempt{key: key, cycle: cycle, begin: begin, root: root}
	tree, err := c.d.Reader.Read(root)
	if err != nil {
		return false, c.refuse(ctx, a, metrics.ReasonUnsupported, vocab.ReasonUnschedulable, err.Error())
	}
	if a.leaves, err = c.read(ctx, tree); err != nil {
		return false, err
	}
	if name := a.restarting(); name != "" {
		// The tree is placed again as one decision once the old members
		// of its restarting leaves are gone (their own turns evict them).
		klog.FromContext(ctx).V(3).Info("Tree waits for a leaf's restart", "podgroup", name)
		c.d.Queue.RetryAfter(key, evict.RestartRetry)
		return false, nil
	}
	c.resolve(a, tree)
	if a.pods() == 0 {
		// Nothing waits (a placed tree's pods changed): nothing to try until
		// a member arrives, as for a flat gang.
		c.d.Forget(key)
		return false, c.d.Done(ctx, key)
	}
	if ok, why := tree.Ready(func(pg *schedulingv1beta1.PodGroup) Count {
		ms := a.leaves[pg.UID].ms
		return Count{All: len(ms.Pending) + len(ms.Running) + len(ms.Gated), Gated: len(ms.Gated)}
	}); !ok {
		return false, c.notReady(ctx, a, why)
	}
	group, err := tree.Group(func(pg *schedulingv1beta1.PodGroup) (*placement.Gang, error) {
		return c.leafGang(ctx, a.leaves[pg.UID])
	})
	if errors.Is(err, placement.ErrNotReady) {
		return false, c.notReady(ctx, a, err.Error())
	}
	if err != nil {
		return false, c.refuse(ctx, a, metrics.ReasonSchedulerError, vocab.ReasonSchedulerError, err.Error())
	}
	return c.place(ctx, a, group)
}

// root reads the root CompositePodGroup of the tree key; done: nothing to
// try now (committed and not shown yet, gone, not a root, or a half-done
// commit recovered first).
func (c *Cycle) root(ctx context.Context, key string, cycle uint64) (*schedulingv1alpha3.CompositePodGroup, bool, error) {
	if c.d.Assumed.Waiting(key, c.d.Visible) {
		c.d.Queue.RetryAfter(key, time.Second) // committed, not shown yet
		return nil, true, nil
	}
	_, ns, name := vocab.SplitKey(key)
	root, err := c.d.Lister(ns, name)
	if apierrors.IsNotFound(err) {
		c.d.Forget(key)
		return nil, true, c.d.Done(ctx, key)
	}
	if err != nil {
		return nil, true, fmt.Errorf("get compositepodgroup: %w", err)
	}
	if p := root.Spec.ParentCompositePodGroupName; p != nil { // not a root: its tree is tried
		if top, err := c.d.Reader.RootOf(ns, *p); err == nil {
			c.d.Queue.Add(vocab.CompositeKey(ns, top))
		}
		c.d.Forget(key)
		return nil, true, nil
	}
	if cm := c.d.Commits.Record(root.UID); cm != nil {
		if err := c.d.Commits.RecoverRecord(ctx, cm); err != nil {
			if !gate.Stops(err) {
				c.d.Queue.Park(key, cycle)
			}
			return nil, true, err
		}
		c.d.Queue.RetryAfter(key, time.Second)
		return nil, true, nil
	}
	return root, false, nil
}

// attempt is one attempt of a tree.
type attempt struct {
	key    string
	cycle  uint64
	begin  time.Time
	root   *schedulingv1alpha3.CompositePodGroup
	leaves map[types.UID]*leafState
	// pre is the attempt as the evict room sees it, with the tree's
	// effective priority (resolve); nil until the leaves are read.
	pre *evict.Attempt
}

// restarting names a leaf whose old members are going, "" none.
func (a *attempt) restarting() string {
	for _, l := range a.sorted() {
		if l.ms.Restarting {
			return l.pg.Name
		}
	}
	return ""
}

// sorted lists the leaves by name.
func (a *attempt) sorted() []*leafState {
	out := slices.Collect(maps.Values(a.leaves))
	slices.SortFunc(out, func(x, y *leafState) int { return strings.Compare(x.pg.Name, y.pg.Name) })
	return out
}

// read reads each leaf's members, and says why gated pods wait.
func (c *Cycle) read(ctx context.Context, tree *Tree) (map[types.UID]*leafState, error) {
	out := make(map[types.UID]*leafState, len(tree.Leaves))
	var gated []*v1.Pod
	for _, l := range tree.Leaves {
		ms, err := c.d.Members(l.PodGroup)
		if err != nil {
			return nil, err
		}
		gated = append(gated, ms.Gated...)
		out[l.PodGroup.UID] = &leafState{pg: l.PodGroup, ms: ms}
	}
	c.d.SetPods(ctx, gated, v1.PodReasonSchedulingGated, gatedMessage)
	return out, nil
}

// gatedMessage is kube-scheduler's message for a gated pod.
const gatedMessage = "Scheduling is blocked due to non-empty scheduling gates"

// leafGang is a leaf's gang: its waiting members (late ones join its
// running members' domain), nil when it has none and none runs.
func (c *Cycle) leafGang(ctx context.Context, l *leafState) (*placement.Gang, error) {
	pg, ms := l.pg, l.ms
	if len(ms.Pending) == 0 {
		if len(ms.Running) == 0 {
			return nil, nil
		}
		return &placement.Gang{Namespace: pg.Namespace, Name: pg.Name, UID: pg.UID, BoundNodes: ms.BoundNodes}, nil
	}
	group := pg
	if ms.AnyBound {
		group = pg.DeepCopy() // late members: whatever joins
		group.Spec.SchedulingPolicy.Gang = nil
	}
	g, err := placement.NewGang(group, ms.Pending, c.d.GetClaim)
	if err != nil {
		return nil, fmt.Errorf("podgroup %s: %w", pg.Name, err)
	}
	g.BoundNodes, g.Running = ms.BoundNodes, ms.Running
	if !ms.AnyBound && len(ms.Previous) > 0 {
		// Restarted whole: back to its previous domain when the tree fits
		// so (its spares too), as a flat gang goes (place: unpin).
		g.BoundNodes, g.PreviousNodes = ms.Previous, ms.Previous
	}
	if err := c.d.Prepare(ctx, g); err != nil {
		return nil, err
	}
	l.gang = g
	return g, commit.RecordFits(g)
}

// notReady says why a tree waits, on its waiting pods, and waits.
func (c *Cycle) notReady(ctx context.Context, a *attempt, why string) error {
	_, ns, _ := vocab.SplitKey(a.key)
	c.d.Queue.Wait(a.key, ns, a.cycle)
	c.d.Pending(a.key, metrics.ReasonNotReady)
	klog.FromContext(ctx).V(3).Info("Tree not ready", "reason", why)
	for _, l := range a.leaves {
		c.d.SetPods(ctx, l.ms.Pending, vocab.ReasonWaitingForMembers, "composite pod group tree: "+why)
	}
	return nil
}

// WholeAbove is Reader.WholeAbove on this term's informers.
func (c *Cycle) WholeAbove(pg *schedulingv1beta1.PodGroup) string { return c.d.Reader.WholeAbove(pg) }

// LeavesUnder is Reader.LeavesUnder on this term's informers.
func (c *Cycle) LeavesUnder(key string) ([]*schedulingv1beta1.PodGroup, error) {
	return c.d.Reader.LeavesUnder(key)
}

// Route sends a PodGroup with a parent to its tree's key: it is never
// placed alone. A parent that does not exist yet makes its pods wait; a
// tree that is invalid is refused on the PodGroup.
func (c *Cycle) Route(ctx context.Context, key string, pg *schedulingv1beta1.PodGroup) error {
	top, err := c.d.Reader.RootOf(pg.Namespace, *pg.Spec.ParentCompositePodGroupName)
	if err == nil {
		c.d.Forget(key)
		c.d.Queue.Add(vocab.CompositeKey(pg.Namespace, top))
		return nil
	}
	ms, merr := c.d.Members(pg)
	if merr != nil {
		return merr
	}
	if errors.Is(err, ErrMissing) {
		c.d.Queue.Wait(key, pg.Namespace, c.d.Queue.Cycle())
		c.d.SetPods(ctx, ms.Pending, vocab.ReasonWaitingForMembers, err.Error())
		return nil
	}
	c.d.Queue.Park(key, c.d.Queue.Cycle())
	c.d.Report.Event(pg, v1.EventTypeWarning, vocab.EventFailedScheduling, "Scheduling", err.Error())
	c.d.SetPods(ctx, ms.Pending, v1.PodReasonUnschedulable, err.Error())
	return c.d.Conditions.SetInitiallyScheduled(ctx, pg, metav1.ConditionFalse, vocab.ReasonUnschedulable, err.Error())
}
