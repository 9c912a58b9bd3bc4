package scheduler

import (
	"fmt"
	"sync/atomic"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	schedulingv1alpha3 "k8s.io/api/scheduling/v1alpha3"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	"github.com/gpufabric/gpufabric/pkg/gang/assume"
	"github.com/gpufabric/gpufabric/pkg/gang/evict"
	"github.com/gpufabric/gpufabric/pkg/gang/podstate"
	"github.com/gpufabric/gpufabric/pkg/gang/queue"
	"github.com/gpufabric/gpufabric/pkg/gang/replace"
	"github.com/gpufabric/gpufabric/pkg/gang/trees"
	"github.com/gpufabric/gpufabric/pkg/gang/ungate"
	"github.com/gpufabric/gpufabric/pkg/gang/vocab"
)

// podGroupIndex indexes pods by "<namespace>/<podGroupName>"; nodeIndex
// bound pods by node name.
const (
	podGroupIndex = "podgroup"
	nodeIndex     = "node"
)

func indexByNode(obj any) ([]string, error) {
	p, ok := obj.(*v1.Pod)
	if !ok || p.Spec.NodeName == "" {
		return nil, nil
	}
	return []string{p.Spec.NodeName}, nil
}

func indexByPodGroup(obj any) ([]string, error) {
	p, ok := obj.(*v1.Pod)
	if !ok || queue.PodGroupName(p) == "" {
		return nil, nil
	}
	return []string{p.Namespace + "/" + queue.PodGroupName(p)}, nil
}

// informerSet holds the shared informers of one leadership term.
type informerSet struct {
	factory   informers.SharedInformerFactory
	pods      cache.SharedIndexInformer
	podGroups cache.SharedIndexInformer
	claims    cache.SharedIndexInformer
	slices    cache.SharedIndexInformer
	classes   cache.SharedIndexInformer
	nodes     cache.SharedIndexInformer
	pvcs      cache.SharedIndexInformer
	volumes   cache.SharedIndexInformer
	storage   cache.SharedIndexInformer
	templates cache.SharedIndexInformer
	pdbs      cache.SharedIndexInformer
	// priorities: the PriorityClasses PodGroups name (evict.Priorities).
	priorities cache.SharedIndexInformer
	// composites: the CompositePodGroups (nil unless
	// Config.CompositePodGroups).
	composites cache.SharedIndexInformer
	// disrupted: members a taint manager deleted, and restarts the replace
	// room asked for, by gang key; deletions: when nodes were deleted.
	disrupted evict.Disruptions
	deletions replace.Deletions
	// lost hears of the members disrupted notes (replace.Replacer.Disrupted).
	lost func(key string, p *v1.Pod)
	// capacityEvents counts the events that can change free devices
	// (slices, claims, nodes), so idle loops can skip their work.
	capacityEvents atomic.Uint64
	// topologyEvents counts the events that can change the fabric tree
	// (slices; nodes added, deleted or relabelled).
	topologyEvents atomic.Uint64
	// metrics observes PodGroups deleted before they were placed (nil: none).
	metrics *Metrics
	// ungated: when each gang's last gate went (gang_wait_seconds).
	ungated ungate.Times
}

func newInformerSet(factory informers.SharedInformerFactory, composites bool) (*informerSet, error) {
	s := &informerSet{
		factory:   factory,
		pods:      factory.Core().V1().Pods().Informer(),
		podGroups: factory.Scheduling().V1beta1().PodGroups().Informer(),
		claims:    factory.Resource().V1().ResourceClaims().Informer(),
		slices:    factory.Resource().V1().ResourceSlices().Informer(),
		classes:   factory.Resource().V1().DeviceClasses().Informer(),
		nodes:     factory.Core().V1().Nodes().Informer(),
		pvcs:      factory.Core().V1().PersistentVolumeClaims().Informer(),
		volumes:   factory.Core().V1().PersistentVolumes().Informer(),
		storage:   factory.Storage().V1().StorageClasses().Informer(),
		templates: factory.Resource().V1().ResourceClaimTemplates().Informer(),
		pdbs:      factory.Policy().V1().PodDisruptionBudgets().Informer(),
		ungated:   ungate.Times{KeyOf: queue.KeyOf},

		priorities: factory.Scheduling().V1().PriorityClasses().Informer(),
	}
	if err := s.pods.AddIndexers(cache.Indexers{podGroupIndex: indexByPodGroup, nodeIndex: indexByNode}); err != nil {
		return nil, fmt.Errorf("add pod index: %w", err)
	}
	if !composites {
		return s, nil
	}
	s.composites = factory.Scheduling().V1alpha3().CompositePodGroups().Informer()
	for _, inf := range []cache.SharedIndexInformer{s.composites, s.podGroups} {
		if err := inf.AddIndexers(cache.Indexers{trees.ParentIndex: trees.IndexByParent}); err != nil {
			return nil, fmt.Errorf("add parent index: %w", err)
		}
	}
	return s, nil
}

func (s *informerSet) synced() []cache.InformerSynced {
	out := []cache.InformerSynced{s.pods.HasSynced, s.podGroups.HasSynced, s.claims.HasSynced,
		s.slices.HasSynced, s.classes.HasSynced, s.nodes.HasSynced, s.pvcs.HasSynced, s.volumes.HasSynced, s.storage.HasSynced, s.templates.HasSynced, s.pdbs.HasSynced, s.priorities.HasSynced}
	if s.composites != nil {
		out = append(out, s.composites.HasSynced)
	}
	return out
}

// informerHandler is an event handler of one informer.
type informerHandler struct {
	inf cache.SharedIndexInformer
	h   cache.ResourceEventHandlerFuncs
}

// watch connects the informers to the queue. Rules: an event about a gang's
// own objects queues that gang; a change that can free capacity (node
// added or changed, slice or class added or changed) flushes the parked
// gangs, and an allocated claim deallocated or deleted frees its devices
// (queue.DevicesFreed; other claims' deletions wake no gang); a bound pod gone or finished frees
// only node resources (its claims stay allocated until their own event),
// so it wakes the parked gangs that were not short of free devices; a new
// claim wakes the not-ready gangs of its namespace. Each handler of first
// (the placement cache's feed) runs, for every event, before the queue's
// handler of its informer, in one handler: separate handlers of an
// informer run in no set order, and a gang woken before the cache has the
// change that woke it would be refused on stale state and back off.
func (s *informerSet) watch(q queue.Events, first []informerHandler) error {
	handlers := append(s.gangHandlers(q), s.capacityHandlers(q)...)
	handlers = append(handlers, s.counterHandlers()...)
	for _, h := range chainFirst(first, handlers) {
		if _, err := h.inf.AddEventHandler(h.h); err != nil {
			return fmt.Errorf("add event handler: %w", err)
		}
	}
	return nil
}

// gangHandlers queue the gangs whose own objects changed: pods, PodGroups,
// claims and CompositePodGroups (watch says the rules).
func (s *informerSet) gangHandlers(q queue.Events) []informerHandler {
	handlers := []informerHandler{
		{s.pods, cache.ResourceEventHandlerFuncs{
			AddFunc: func(obj any) {
				s.noteUngated(nil, obj) // before the queue hears of the pod
				podChanged(q, nil, obj)
			},
			UpdateFunc: func(old, obj any) {
				s.noteDisruption(q, obj)
				s.noteUngated(old, obj)
				podChanged(q, old, obj)
			},
			DeleteFunc: func(obj any) {
				s.noteDisruption(q, obj)
				s.podGone(obj)
				podDeleted(q, obj)
			},
		}},
		{s.podGroups, cache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { podGroupChanged(q, nil, obj) },
			UpdateFunc: func(old, obj any) { podGroupChanged(q, old, obj) },
			DeleteFunc: func(obj any) {
				if pg, ok := tombstone[*schedulingv1beta1.PodGroup](obj); ok {
					key := queue.PodGroupKey(pg.Namespace, pg.Name)
					s.metrics.GangAbandoned(pg, s.ungated.Take(key), time.Now())
					q.Add(key) // its waiting pods say so
				}
			},
		}},
		{s.claims, cache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { claimChanged(q, nil, obj) },
			UpdateFunc: func(old, obj any) { claimChanged(q, old, obj) },
			DeleteFunc: func(obj any) { claimDeleted(q, obj) },
		}},
	}
	if s.composites != nil {
		tree := func(obj any) { // its tree is tried (a PodGroup's event reaches it through the PodGroup's key)
			if c, ok := tombstone[*schedulingv1alpha3.CompositePodGroup](obj); ok {
				q.Add(vocab.CompositeKey(c.Namespace, c.Name))
			}
		}
		handlers = append(handlers, informerHandler{s.composites, cache.ResourceEventHandlerFuncs{AddFunc: tree, UpdateFunc: func(_, obj any) { tree(obj) }, DeleteFunc: tree}})
	}
	return handlers
}

// capacityHandlers wake the gangs a change may let fit: slices, classes,
// volume claims and nodes (watch says the rules).
func (s *informerSet) capacityHandlers(q queue.Events) []informerHandler {
	return []informerHandler{
		{s.slices, cache.ResourceEventHandlerFuncs{
			AddFunc:    func(any) { q.FlushParked() },
			UpdateFunc: func(any, any) { q.FlushParked() },
		}},
		{s.classes, cache.ResourceEventHandlerFuncs{
			AddFunc:    func(any) { q.FlushParked() },
			UpdateFunc: func(any, any) { q.FlushParked() },
		}},
		{s.pvcs, cache.ResourceEventHandlerFuncs{
			// A claim created or bound may make a waiting gang of its namespace ready.
			AddFunc:    func(obj any) { wakeNamespace(q, obj) },
			UpdateFunc: func(_, obj any) { wakeNamespace(q, obj) },
		}},
		{s.nodes, cache.ResourceEventHandlerFuncs{
			AddFunc: func(obj any) {
				if n, ok := obj.(*v1.Node); ok {
					s.deletions.Added(n.Name)
				}
				q.FlushParked()
			},
			UpdateFunc: func(old, obj any) {
				if nodeChanged(q, old, obj) {
					s.nodeGangs(q, obj) // its members may be lost (replace in place)
				}
			},
			DeleteFunc: func(obj any) { s.nodeDeleted(q, obj) },
		}},
	}
}

// counterHandlers count the events that may change capacity (slices,
// claims, nodes) and the fabric tree (slices, nodes added, deleted or
// relabelled).
func (s *informerSet) counterHandlers() []informerHandler {
	var handlers []informerHandler
	bump := func(any) { s.capacityEvents.Add(1) }
	for _, inf := range []cache.SharedIndexInformer{s.slices, s.claims, s.nodes} {
		handlers = append(handlers, informerHandler{inf, cache.ResourceEventHandlerFuncs{AddFunc: bump, UpdateFunc: func(_, obj any) { bump(obj) }, DeleteFunc: bump}})
	}
	topo := func(any) { s.topologyEvents.Add(1) }
	handlers = append(handlers, informerHandler{s.slices, cache.ResourceEventHandlerFuncs{AddFunc: topo, UpdateFunc: func(_, obj any) { topo(obj) }, DeleteFunc: topo}},
		informerHandler{s.nodes, cache.ResourceEventHandlerFuncs{AddFunc: topo, DeleteFunc: topo, UpdateFunc: func(old, obj any) {
			o, ok1 := old.(*v1.Node)
			n, ok2 := obj.(*v1.Node)
			if !ok1 || !ok2 || !equality.Semantic.DeepEqual(o.Labels, n.Labels) {
				topo(obj)
			}
		}}})
	return handlers
}

// trimObject drops what the scheduler never reads from the objects its
// informers keep: managedFields, often a third of a pod's or a slice's
// bytes (kube-scheduler trims them too). Writes never send a cached
// object's managedFields back (nil leaves the server's as they are).
func trimObject(obj any) (any, error) {
	if a, err := meta.Accessor(obj); err == nil {
		a.SetManagedFields(nil)
	}
	return obj, nil
}

// tombstone unwraps a delete event's object.
func tombstone[T any](obj any) (T, bool) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	t, ok := obj.(T)
	return t, ok
}

func podChanged(q queue.Events, oldObj, obj any) {
	p, ok := obj.(*v1.Pod)
	if !ok {
		return
	}
	old, _ := oldObj.(*v1.Pod)
	if podstate.Pending(p) || podstate.Ours(p) && p.Spec.NodeName == "" && len(p.Spec.SchedulingGates) > 0 {
		if old == nil || podUpdated(old, p) {
			q.Add(queue.KeyOf(p)) // to place, or to say it is gated
		}
		return
	}
	if old == nil {
		return
	}
	if old.Spec.NodeName == "" {
		if p.Spec.NodeName != "" && podstate.Ours(p) && queue.PodGroupName(p) != "" {
			q.Add(queue.KeyOf(p)) // a member bound: its gang's status
		}
		return
	}
	if !podstate.Terminated(old) && podstate.Terminated(p) {
		q.NodeResourcesFreed() // a bound pod finished: its node resources are free
	}
	if podstate.Ours(p) && queue.PodGroupName(p) != "" && (old.Status.Phase != p.Status.Phase || old.DeletionTimestamp == nil && p.DeletionTimestamp != nil) {
		q.Add(queue.KeyOf(p)) // a member stopped running: its gang's status
	}
}

// podUpdated reports whether an update of an unbound pod can change how
// its gang is placed, as kube-scheduler's isPodUpdated: anything but the
// status, resourceVersion, generation, managedFields and finalizers;
// of the status, the claim statuses (a template's claim created) and the
// phase (pending reads it) count. The status writes the scheduler makes
// itself (PodScheduled, nominatedNodeName) therefore do not wake the gang
// they explain: each would cost a refused attempt and a doubled backoff.
func podUpdated(old, p *v1.Pod) bool {
	strip := func(pod *v1.Pod) v1.Pod {
		c := *pod // shallow: only top-level fields are replaced
		c.ResourceVersion, c.Generation, c.ManagedFields, c.Finalizers = "", 0, nil, nil
		c.Status = v1.PodStatus{Phase: pod.Status.Phase, ResourceClaimStatuses: pod.Status.ResourceClaimStatuses}
		return c
	}
	a, b := strip(old), strip(p)
	return !equality.Semantic.DeepEqual(&a, &b)
}

// nodeDeleted frees the node's capacity for parked gangs and looks at the
// gangs that had members there.
func (s *informerSet) nodeDeleted(q queue.Events, obj any) {
	n, ok := tombstone[*v1.Node](obj)
	if !ok {
		return
	}
	s.deletions.Deleted(n.Name, time.Now())
	q.FlushParked()
	s.nodeGangs(q, n)
}

// nodeGangs queues the gangs with members bound to a node.
func (s *informerSet) nodeGangs(q queue.Events, obj any) {
	n, ok := tombstone[*v1.Node](obj)
	if !ok {
		return
	}
	objs, _ := s.pods.GetIndexer().ByIndex(nodeIndex, n.Name)
	for _, o := range objs {
		if p, ok := o.(*v1.Pod); ok && podstate.Ours(p) && queue.PodGroupName(p) != "" {
			q.Add(queue.KeyOf(p))
		}
	}
}

// noteUngated notes a pod whose gates went (ungate.Times): old nil for
// an add.
func (s *informerSet) noteUngated(oldObj, obj any) {
	p, ok := obj.(*v1.Pod)
	if old, okOld := oldObj.(*v1.Pod); ok && okOld {
		s.ungated.Updated(old, p)
	} else if ok && oldObj == nil {
		s.ungated.Added(p)
	}
}

// podGone forgets when a deleted pod's gang was ungated once no pod of the
// gang is left in the informer (whose store no longer has the pod).
func (s *informerSet) podGone(obj any) {
	p, ok := tombstone[*v1.Pod](obj)
	if !ok {
		return
	}
	if group := queue.PodGroupName(p); group != "" {
		if left, err := s.pods.GetIndexer().ByIndex(podGroupIndex, p.Namespace+"/"+group); err != nil || len(left) > 0 {
			return
		}
	}
	s.ungated.Forget(queue.KeyOf(p))
}

// noteDisruption remembers a member deleted by a taint manager and queues
// its gang (evict.Restarter).
func (s *informerSet) noteDisruption(q queue.Events, obj any) {
	if p, ok := tombstone[*v1.Pod](obj); ok && s.disrupted.Note(p) {
		if s.lost != nil {
			s.lost(queue.KeyOf(p), p)
		}
		q.Add(queue.KeyOf(p))
	}
}

func podDeleted(q queue.Events, obj any) {
	p, ok := tombstone[*v1.Pod](obj)
	if !ok {
		return
	}
	if p.Spec.NodeName != "" {
		q.NodeResourcesFreed() // its devices are freed with its claims
	}
	if podstate.Ours(p) && queue.PodGroupName(p) != "" {
		q.Add(queue.KeyOf(p))
	}
}

func podGroupChanged(q queue.Events, oldObj, obj any) {
	pg, ok := obj.(*schedulingv1beta1.PodGroup)
	if !ok {
		return
	}
	old, ok := oldObj.(*schedulingv1beta1.PodGroup)
	if ok && old.Generation == pg.Generation && (old.DeletionTimestamp == nil) == (pg.DeletionTimestamp == nil) &&
		equality.Semantic.DeepEqual(old.Annotations, pg.Annotations) &&
		equality.Semantic.DeepEqual(old.Status.ResourceClaimStatuses, pg.Status.ResourceClaimStatuses) {
		return // our own condition writes, mostly
	}
	q.Add(queue.PodGroupKey(pg.Namespace, pg.Name))
}

func claimChanged(q queue.Events, oldObj, obj any) {
	c, ok := obj.(*resourceapi.ResourceClaim)
	if !ok {
		return
	}
	old, ok := oldObj.(*resourceapi.ResourceClaim)
	if !ok {
		q.WakeWaiting(c.Namespace)
		return
	}
	if old.Status.Allocation != nil && c.Status.Allocation == nil {
		devicesFreed(q, old.Status.Allocation)
	}
}

// claimDeleted frees a deleted claim's devices for the parked gangs. Only
// an allocated claim holds devices: the deletion of any other claim (a
// tenant may create and delete them at will) wakes no gang, since no
// parked gang was refused for it (a gang whose own claim went learns it
// from the claim's re-creation or its next attempt).
func claimDeleted(q queue.Events, obj any) {
	if c, ok := tombstone[*resourceapi.ResourceClaim](obj); ok && c.Status.Allocation != nil {
		devicesFreed(q, c.Status.Allocation)
	}
}

// devicesFreed tells the queue about the devices an allocation gave up;
// results with admin access hold no device, so an allocation of only
// those wakes no gang.
func devicesFreed(q queue.Events, a *resourceapi.AllocationResult) {
	if n := len(assume.AppendHeld(nil, a.Devices.Results)); n > 0 {
		q.DevicesFreed(n)
	}
}

// nodeChanged flushes the parked gangs on a change that can free
// capacity, and reports whether the node's taints or Ready condition
// changed (its members may be lost).
func nodeChanged(q queue.Events, oldObj, obj any) bool {
	o, ok1 := oldObj.(*v1.Node)
	n, ok2 := obj.(*v1.Node)
	if !ok1 || !ok2 {
		return false
	}
	taints := !equality.Semantic.DeepEqual(o.Spec.Taints, n.Spec.Taints)
	if o.Spec.Unschedulable != n.Spec.Unschedulable || taints ||
		!equality.Semantic.DeepEqual(o.Labels, n.Labels) ||
		!equality.Semantic.DeepEqual(o.Status.Allocatable, n.Status.Allocatable) {
		q.FlushParked()
	}
	return taints || readyOf(o) != readyOf(n)
}

// readyOf is a node's Ready condition status ("" without one).
func readyOf(n *v1.Node) v1.ConditionStatus {
	for _, c := range n.Status.Conditions {
		if c.Type == v1.NodeReady {
			return c.Status
		}
	}
	return ""
}

func wakeNamespace(q queue.Events, obj any) {
	if pvc, ok := obj.(*v1.PersistentVolumeClaim); ok {
		q.WakeWaiting(pvc.Namespace)
	}
}
