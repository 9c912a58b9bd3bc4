package grouper

import (
	"context"
	"fmt"
	"slices"
	"sync"

	schedulingv1alpha3 "k8s.io/api/scheduling/v1alpha3"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/gpufabric/gpufabric/pkg/workloads/grouping"
)

// Index names.
const (
	byOwner      = "controller-uid"      // objects by their controller's UID
	byController = "workload-controller" // Workloads by spec.controllerRef: "<ns>/<kind>/<name>"
)

// watches are the grouper's informers: the base ones (its own PodGroups,
// CompositePodGroups, every Workload, the labelled namespaces) for the
// process's life, one per served workload kind and parent kind, started
// and stopped as discovery finds them served or gone.
type watches struct {
	g *Grouper

	podGroups, workloads, namespaces cache.SharedIndexInformer

	mu         sync.Mutex
	composites cache.SharedIndexInformer // nil until v1alpha3 is served (composite mode)
	kinds      map[grouping.Kind]*watch
	parents    map[schema.GroupVersionResource]*watch
}

// watch is the informer of one served resource.
type watch struct {
	informer cache.SharedIndexInformer
	cancel   context.CancelFunc
}

func newWatches(g *Grouper) *watches {
	return &watches{g: g, kinds: map[grouping.Kind]*watch{}, parents: map[schema.GroupVersionResource]*watch{}}
}

func ownerIndex(obj any) ([]string, error) {
	m, err := metaOf(obj)
	if err != nil {
		return nil, nil
	}
	if c := metav1.GetControllerOfNoCopy(m); c != nil {
		return []string{string(c.UID)}, nil
	}
	return nil, nil
}

func controllerIndex(obj any) ([]string, error) {
	w, ok := obj.(*schedulingv1beta1.Workload)
	if !ok || w.Spec.ControllerRef == nil {
		return nil, nil
	}
	r := w.Spec.ControllerRef
	return []string{w.Namespace + "/" + r.Kind + "/" + r.Name}, nil
}

func metaOf(obj any) (metav1.Object, error) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	m, ok := obj.(metav1.Object)
	if !ok {
		return nil, fmt.Errorf("%T has no object meta", obj)
	}
	return m, nil
}

// startBase starts the base informers and waits until they synced, then
// discovers the served kinds once.
func (w *watches) startBase(ctx context.Context) error {
	cfg := w.g.cfg
	ours := informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = grouping.LabelManagedBy + "=" + grouping.ManagedBy })
	owned := informers.NewSharedInformerFactoryWithOptions(cfg.Client, cfg.Resync, ours)
	all := informers.NewSharedInformerFactory(cfg.Client, cfg.Resync)
	w.podGroups = owned.Scheduling().V1beta1().PodGroups().Informer()
	w.workloads = all.Scheduling().V1beta1().Workloads().Informer()
	labelled := metadatainformer.NewFilteredMetadataInformer(cfg.Metadata, schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}, metav1.NamespaceAll, cfg.Resync,
		cache.Indexers{}, func(o *metav1.ListOptions) { o.LabelSelector = grouping.LabelNamespaceDefault + "=true" })
	w.namespaces = labelled.Informer()
	if err := w.podGroups.AddIndexers(cache.Indexers{byOwner: ownerIndex}); err != nil {
		return fmt.Errorf("index PodGroups: %w", err)
	}
	if err := w.workloads.AddIndexers(cache.Indexers{byOwner: ownerIndex, byController: controllerIndex}); err != nil {
		return fmt.Errorf("index Workloads: %w", err)
	}
	for _, inf := range []cache.SharedIndexInformer{w.podGroups, w.workloads} {
		if _, err := inf.AddEventHandler(handler(w.ownerChanged)); err != nil {
			return fmt.Errorf("watch: %w", err)
		}
	}
	if _, err := w.namespaces.AddEventHandler(handler(w.namespaceChanged)); err != nil {
		return fmt.Errorf("watch namespaces: %w", err)
	}
	owned.Start(ctx.Done())
	all.Start(ctx.Done())
	go w.namespaces.Run(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), w.podGroups.HasSynced, w.workloads.HasSynced, w.namespaces.HasSynced) {
		return fmt.Errorf("grouper: informers did not sync: %w", context.Cause(ctx))
	}
	w.discover(ctx)
	w.g.setSynced()
	return nil
}

// handler calls f with the object of every add, update and delete.
func handler(f func(obj any)) cache.ResourceEventHandlerFuncs {
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    f,
		UpdateFunc: func(_, n any) { f(n) },
		DeleteFunc: f,
	}
}

// discover starts the informers of newly served kinds and stops those of
// kinds no longer served. An error of discovery leaves everything as is.
func (w *watches) discover(ctx context.Context) {
	logger := klog.FromContext(ctx)
	for _, info := range grouping.Kinds() {
		served, err := w.served(info.GVR)
		if err != nil {
			logger.V(2).Info("Discovery failed, keeping the watches", "resource", info.GVR.String(), "err", err)
			continue
		}
		w.toggleKind(ctx, info, served)
		for _, p := range info.Parents {
			if served, err := w.served(p); err == nil {
				w.toggleParent(ctx, p, served)
			}
		}
	}
	if w.g.cfg.Mode == grouping.ModeComposite {
		gvr := schedulingv1alpha3.SchemeGroupVersion.WithResource("compositepodgroups")
		if served, err := w.served(gvr); err == nil && served {
			w.startComposites(ctx)
		}
	}
}

func (w *watches) served(gvr schema.GroupVersionResource) (bool, error) {
	list, err := w.g.cfg.Discovery.ServerResourcesForGroupVersion(gvr.GroupVersion().String())
	if err != nil {
		if isNotFound(err) {
			return false, nil
		}
		return false, err
	}
	return slices.ContainsFunc(list.APIResources, func(r metav1.APIResource) bool { return r.Name == gvr.Resource }), nil
}

func (w *watches) toggleKind(ctx context.Context, info grouping.KindInfo, served bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	cur := w.kinds[info.Kind]
	switch {
	case served && cur == nil:
		ctx, cancel := context.WithCancel(ctx)
		inf := dynamicinformer.NewFilteredDynamicInformer(w.g.cfg.Dynamic, info.GVR, metav1.NamespaceAll, w.g.cfg.Resync,
			cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc, byOwner: ownerIndex}, nil).Informer()
		kind := info.Kind
		changed := func(o any) { w.workloadChanged(kind, o) }
		if kind == grouping.KindSchedulerPluginsPodGroup || kind == grouping.KindVolcanoPodGroup {
			// A gang API's PodGroup also decides whether its owner (a
			// RayCluster, a RayJob's cluster) gets a group of its own.
			changed = func(o any) { w.workloadChanged(kind, o); w.ownerChanged(o); w.parentChanged(controllerOf(o)) }
		}
		_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc: changed,
			UpdateFunc: func(old, n any) {
				if specChanged(old, n) {
					changed(n)
				}
			},
			DeleteFunc: changed,
		})
		go inf.Run(ctx.Done())
		w.kinds[info.Kind] = &watch{informer: inf, cancel: cancel}
		klog.FromContext(ctx).Info("Watching workloads", "kind", info.Kind, "resource", info.GVR.String())
	case !served && cur != nil:
		cur.cancel()
		delete(w.kinds, info.Kind)
		klog.FromContext(ctx).Info("Stopped watching workloads: no longer served", "kind", info.Kind)
	}
}

func (w *watches) toggleParent(ctx context.Context, gvr schema.GroupVersionResource, served bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	cur := w.parents[gvr]
	switch {
	case served && cur == nil:
		ctx, cancel := context.WithCancel(ctx)
		inf := metadatainformer.NewFilteredMetadataInformer(w.g.cfg.Metadata, gvr, metav1.NamespaceAll, w.g.cfg.Resync, cache.Indexers{}, nil).Informer()
		_, _ = inf.AddEventHandler(handler(w.parentChanged))
		go inf.Run(ctx.Done())
		w.parents[gvr] = &watch{informer: inf, cancel: cancel}
	case !served && cur != nil:
		cur.cancel()
		delete(w.parents, gvr)
	}
}

func (w *watches) startComposites(ctx context.Context) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.composites != nil {
		return
	}
	f := informers.NewSharedInformerFactoryWithOptions(w.g.cfg.Client, w.g.cfg.Resync,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = grouping.LabelManagedBy + "=" + grouping.ManagedBy }))
	inf := f.Scheduling().V1alpha3().CompositePodGroups().Informer()
	_ = inf.AddIndexers(cache.Indexers{byOwner: ownerIndex})
	_, _ = inf.AddEventHandler(handler(w.ownerChanged))
	f.Start(ctx.Done())
	w.composites = inf
}

// specChanged: an update worth a reconcile (not a status update).
func specChanged(old, n any) bool {
	a, errA := metaOf(old)
	b, errB := metaOf(n)
	if errA != nil || errB != nil {
		return true
	}
	return a.GetGeneration() != b.GetGeneration() || a.GetGeneration() == 0 && a.GetResourceVersion() != b.GetResourceVersion() ||
		!equalMaps(a.GetAnnotations(), b.GetAnnotations()) || !slices.Equal(ownerUIDs(a), ownerUIDs(b)) || (a.GetDeletionTimestamp() == nil) != (b.GetDeletionTimestamp() == nil)
}

func equalMaps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func ownerUIDs(m metav1.Object) []string {
	var out []string
	for _, r := range m.GetOwnerReferences() {
		out = append(out, string(r.UID))
	}
	return out
}

func (w *watches) workloadChanged(kind grouping.Kind, obj any) {
	if m, err := metaOf(obj); err == nil {
		w.g.enqueue(key{kind: kind, namespace: m.GetNamespace(), name: m.GetName()})
	}
}

// ownerChanged re-queues the workload that controls a PodGroup, a
// CompositePodGroup or a Workload (ours, or a Job controller's).
func (w *watches) ownerChanged(obj any) {
	m, err := metaOf(obj)
	if err != nil {
		return
	}
	if c := metav1.GetControllerOfNoCopy(m); c != nil {
		gv, err := schema.ParseGroupVersion(c.APIVersion)
		if err != nil {
			return
		}
		if kind := grouping.KindOfGroupKind(gv.WithKind(c.Kind).GroupKind()); kind != "" {
			w.g.enqueue(key{kind: kind, namespace: m.GetNamespace(), name: c.Name})
		}
	}
}

// controllerOf is a stand-in object carrying the UID of obj's controller
// (nil when it has none), for parentChanged.
func controllerOf(obj any) any {
	m, err := metaOf(obj)
	if err != nil {
		return nil
	}
	c := metav1.GetControllerOfNoCopy(m)
	if c == nil {
		return nil
	}
	return &metav1.ObjectMeta{UID: c.UID, Name: c.Name, Namespace: m.GetNamespace()}
}

// parentChanged re-queues the workloads a TrainJob or RayJob controls.
func (w *watches) parentChanged(obj any) {
	m, err := metaOf(obj)
	if err != nil {
		return
	}
	w.forEachKind(func(kind grouping.Kind, inf cache.SharedIndexInformer) {
		children, _ := inf.GetIndexer().ByIndex(byOwner, string(m.GetUID()))
		for _, c := range children {
			w.workloadChanged(kind, c)
		}
	})
}

// namespaceChanged re-queues every workload of a namespace whose default
// changed.
func (w *watches) namespaceChanged(obj any) {
	m, err := metaOf(obj)
	if err != nil {
		return
	}
	w.forEachKind(func(kind grouping.Kind, inf cache.SharedIndexInformer) {
		objs, _ := inf.GetIndexer().ByIndex(cache.NamespaceIndex, m.GetName())
		for _, o := range objs {
			w.workloadChanged(kind, o)
		}
	})
}

func (w *watches) forEachKind(f func(grouping.Kind, cache.SharedIndexInformer)) {
	w.mu.Lock()
	kinds := make(map[grouping.Kind]cache.SharedIndexInformer, len(w.kinds))
	for k, v := range w.kinds {
		kinds[k] = v.informer
	}
	w.mu.Unlock()
	for k, inf := range kinds {
		f(k, inf)
	}
}

func (w *watches) kind(k grouping.Kind) cache.SharedIndexInformer {
	w.mu.Lock()
	defer w.mu.Unlock()
	if kw := w.kinds[k]; kw != nil {
		return kw.informer
	}
	return nil
}

func (w *watches) parent(gvr schema.GroupVersionResource) cache.SharedIndexInformer {
	w.mu.Lock()
	defer w.mu.Unlock()
	if p := w.parents[gvr]; p != nil {
		return p.informer
	}
	return nil
}

func (w *watches) compositeInformer() cache.SharedIndexInformer {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.composites
}
