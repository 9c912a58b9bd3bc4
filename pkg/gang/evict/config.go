package evict

import (
	"context"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	schedulingv1alpha3 "k8s.io/api/scheduling/v1alpha3"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	policylisters "k8s.io/client-go/listers/policy/v1"
	resourcelisters "k8s.io/client-go/listers/resource/v1"
	schedulingv1listers "k8s.io/client-go/listers/scheduling/v1"
	schedulinglisters "k8s.io/client-go/listers/scheduling/v1beta1"
	"k8s.io/utils/clock"

	"github.com/gpufabric/gpufabric/pkg/gang/commit"
	"github.com/gpufabric/gpufabric/pkg/gang/gate"
	"github.com/gpufabric/gpufabric/pkg/gang/placement"
	"github.com/gpufabric/gpufabric/pkg/gang/report"
	"github.com/gpufabric/gpufabric/pkg/gang/vocab"
	"github.com/gpufabric/gpufabric/pkg/topology"
)

// schedulerName is the reporting controller of events and the field manager
// of writes.
const schedulerName = topology.SchedulerName

// Releaser releases claims by the recovery rules: the commit room's
// Committer.
type Releaser interface {
	ReleaseClaim(ctx context.Context, namespace, name string, uid types.UID, consumers map[types.UID]bool, clearAlloc func(*resourceapi.AllocationResult) bool) (bool, error)
}

var _ Releaser = (*commit.Committer)(nil)

// Conditions sets one condition on a PodGroup (the loop's writer, past the
// gate); an unchanged condition is not rewritten.
type Conditions interface {
	SetCondition(ctx context.Context, pg *schedulingv1beta1.PodGroup, cond metav1.Condition) error
}

// Requeuer has the loop's queue look at a gang again after a while, cluster
// change or not.
type Requeuer interface {
	RetryAfter(key string, after time.Duration)
}

// Gangs reads gangs' pods from the loop's informers (their indexes).
type Gangs interface {
	// GroupPods lists the pods naming the PodGroup namespace/name, in any
	// state.
	GroupPods(namespace, name string) ([]*v1.Pod, error)
	// NodePods lists the pods bound to a node.
	NodePods(node string) ([]*v1.Pod, error)
	// Waiting lists a PodGroup's members waiting to be placed.
	Waiting(pg *schedulingv1beta1.PodGroup) ([]*v1.Pod, error)
}

// Config is what the evict room needs; the loop fills it for each
// leadership term.
type Config struct {
	Client kubernetes.Interface
	// Store keeps the nomination records (the commit room's record store).
	Store *commit.Store
	// Releaser releases victims' and restarted gangs' shared claims.
	Releaser Releaser
	// Parallelism is the number of evictions or pod status writes in
	// flight at once.
	Parallelism int
	// Gate is checked before every write.
	Gate *gate.Gate
	// Report records events (nil: none).
	Report *report.Reporter
	// Metrics receives the preemption metrics (nil: none).
	Metrics    *Metrics
	Conditions Conditions
	Queue      Requeuer
	Gangs      Gangs
	// Disruptions are the members a taint manager deleted, noted by the
	// loop's pod informer.
	Disruptions *Disruptions
	// The informers' listers.
	Pods      corelisters.PodLister
	PodGroups schedulinglisters.PodGroupLister
	Claims    resourcelisters.ResourceClaimLister
	PDBs      policylisters.PodDisruptionBudgetLister
	// PriorityClasses resolves the classes PodGroups name (priority.go);
	// nil: PodGroups are capped by their pods only.
	PriorityClasses schedulingv1listers.PriorityClassLister
	// Trees reads the CompositePodGroup trees above PodGroups (trees.go);
	// nil: CompositePodGroups are off, every PodGroup stands alone.
	Trees Trees
	// Placement configures the engine the preemption plans with.
	Placement placement.Config
	// DisablePreemption, NominationTimeout, PreemptionBudget and
	// StarvationBound are the scheduler's Config fields of those names.
	DisablePreemption bool
	NominationTimeout time.Duration
	PreemptionBudget  time.Duration
	StarvationBound   time.Duration
	// StarvationReservationsPerNamespace bounds the reservations the
	// starving gangs of one namespace hold at once (0: 1).
	StarvationReservationsPerNamespace int
	// NodeLost, when set, reports whether a member's node is lost (pkg/gang/replace:
	// NotReady past the grace, tainted, deleted): a terminating member
	// there counts as gone for a whole-gang restart, which would otherwise
	// wait for a kubelet that never confirms it.
	NodeLost func(p *v1.Pod) bool
	// Clock, when set, replaces the real clock of the restart backoff and
	// the preemption budget (tests).
	Clock clock.PassiveClock
}

// Attempt is the loop's scheduling attempt of a gang, or of a
// CompositePodGroup tree, as the evict room sees it.
type Attempt struct {
	// Key is the gang's key (vocab.PodGroupKey or vocab.PodKey), or the
	// tree's (vocab.CompositeKey).
	Key      string
	PodGroup *schedulingv1beta1.PodGroup // nil for a gang of one or a tree
	Pod      *v1.Pod                     // the pod of a gang of one
	// Root is a tree's root CompositePodGroup.
	Root *schedulingv1alpha3.CompositePodGroup
	// Priority is the gang's effective priority (Priorities.Group, or
	// Priorities.Tree).
	Priority int32
	// NoPreemption says why the gang may not preempt ("" when it may), and
	// Capped why its priority is below what it asks for ("" when it is
	// not): preemption.Effective's.
	NoPreemption, Capped string
	// Members are the gang's pods to place (a tree's: of all its leaves).
	Members []*v1.Pod
}

// uid is the UID of the PodGroup, of the tree's root, or of the pod of a
// gang of one.
func (a *Attempt) uid() types.UID {
	switch {
	case a.PodGroup != nil:
		return a.PodGroup.UID
	case a.Root != nil:
		return a.Root.UID
	}
	return a.Pod.UID
}

// describe names the gang for messages: "PodGroup ns/name",
// "CompositePodGroup ns/name" (a tree's root) or "pod ns/name".
func (a *Attempt) describe() string {
	switch {
	case a.PodGroup != nil:
		return "PodGroup " + a.PodGroup.Namespace + "/" + a.PodGroup.Name
	case a.Root != nil:
		return "CompositePodGroup " + a.Root.Namespace + "/" + a.Root.Name
	}
	return "pod " + a.Pod.Namespace + "/" + a.Pod.Name
}

// namespace is the gang's namespace.
func (a *Attempt) namespace() string {
	switch {
	case a.PodGroup != nil:
		return a.PodGroup.Namespace
	case a.Root != nil:
		return a.Root.Namespace
	}
	return a.Pod.Namespace
}

// describeTo names the gang for a message read in namespace ns: only a
// gang of ns is named (report.go's rule: no message names another
// namespace's objects).
func (a *Attempt) describeTo(ns string) string {
	if ns == a.namespace() {
		return a.describe()
	}
	return "a gang of another namespace"
}

// about is the object events are about.
func (a *Attempt) about() runtime.Object {
	switch {
	case a.PodGroup != nil:
		return a.PodGroup
	case a.Root != nil:
		return a.Root
	}
	return a.Pod
}

// podGroupName is the PodGroup a pod names, "" for none.
func podGroupName(p *v1.Pod) string {
	if p.Spec.SchedulingGroup == nil || p.Spec.SchedulingGroup.PodGroupName == nil {
		return ""
	}
	return *p.Spec.SchedulingGroup.PodGroupName
}

// keyOf returns the key of the gang a pod belongs to.
func keyOf(p *v1.Pod) string {
	if g := podGroupName(p); g != "" {
		return vocab.PodGroupKey(p.Namespace, g)
	}
	return vocab.PodKey(p.Namespace, p.Name)
}
