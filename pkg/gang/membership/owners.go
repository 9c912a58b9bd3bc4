package membership

import (
	"context"
	"fmt"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/tools/cache"

	"github.com/gpufabric/gpufabric/pkg/gang/vocab"
)

// labelLWSWorkerIndex is LeaderWorkerSet's label; "0" marks a leader pod,
// the owner of its group's worker StatefulSet.
const labelLWSWorkerIndex = "leaderworkerset.sigs.k8s.io/worker-index"

// byController indexes objects by their controller's UID.
const byController = "controller-uid"

var _ Lookup = (*Owners)(nil)

// Owners is the metadata the chains are followed through: Jobs,
// StatefulSets and LeaderWorkerSet leader pods, and the grouper's
// PodGroups (by their controller's UID), from metadata-only informers.
type Owners struct {
	kinds  map[schema.GroupKind]cache.SharedIndexInformer
	groups cache.SharedIndexInformer
	all    []cache.SharedIndexInformer
}

// NewOwners builds the informers (Run starts them). The identity needs
// list and watch of jobs (batch), statefulsets (apps), pods and podgroups.
func NewOwners(client metadata.Interface) *Owners {
	const resync = 0
	o := &Owners{kinds: map[schema.GroupKind]cache.SharedIndexInformer{}}
	add := func(gvr schema.GroupVersionResource, selector string) cache.SharedIndexInformer {
		inf := metadatainformer.NewFilteredMetadataInformer(client, gvr, metav1.NamespaceAll, resync, cache.Indexers{byController: controllerIndex},
			func(opts *metav1.ListOptions) { opts.LabelSelector = selector }).Informer()
		o.all = append(o.all, inf)
		return inf
	}
	o.kinds[schema.GroupKind{Group: "batch", Kind: "Job"}] = add(schema.GroupVersionResource{Group: "batch", Version: "v1", Resource: "jobs"}, "")
	o.kinds[schema.GroupKind{Group: "apps", Kind: "StatefulSet"}] = add(schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "statefulsets"}, "")
	o.kinds[schema.GroupKind{Kind: "Pod"}] = add(schema.GroupVersionResource{Version: "v1", Resource: "pods"}, labelLWSWorkerIndex+"=0")
	o.groups = add(schema.GroupVersionResource{Group: "scheduling.k8s.io", Version: "v1beta1", Resource: "podgroups"}, vocab.LabelManagedBy+"="+vocab.ManagedByGrouper)
	return o
}

func controllerIndex(obj any) ([]string, error) {
	m, ok := obj.(metav1.Object)
	if !ok {
		return nil, nil
	}
	if c := metav1.GetControllerOfNoCopy(m); c != nil {
		return []string{string(c.UID)}, nil
	}
	return nil, nil
}

// Run runs the informers until ctx is done.
func (o *Owners) Run(ctx context.Context) {
	for _, inf := range o.all {
		go inf.Run(ctx.Done())
	}
}

// WaitForSync waits until every informer synced or ctx is done.
func (o *Owners) WaitForSync(ctx context.Context) error {
	if !cache.WaitForCacheSync(ctx.Done(), o.HasSynced) {
		return fmt.Errorf("membership informers (jobs, statefulsets, leader pods, podgroups) did not sync: %w", context.Cause(ctx))
	}
	return nil
}

// HasSynced reports whether every informer synced.
func (o *Owners) HasSynced() bool {
	for _, inf := range o.all {
		if !inf.HasSynced() {
			return false
		}
	}
	return true
}

// ControllerOf implements Lookup.
func (o *Owners) ControllerOf(ns string, ref metav1.OwnerReference) (*metav1.OwnerReference, bool) {
	gv, err := schema.ParseGroupVersion(ref.APIVersion)
	if err != nil {
		return nil, false
	}
	inf := o.kinds[gv.WithKind(ref.Kind).GroupKind()]
	if inf == nil {
		return nil, false
	}
	obj, exists, err := inf.GetIndexer().GetByKey(ns + "/" + ref.Name)
	m, ok := obj.(metav1.Object)
	if err != nil || !exists || !ok || m.GetUID() != ref.UID {
		return nil, false
	}
	return metav1.GetControllerOfNoCopy(m), true
}

// GroupsOf implements Lookup.
func (o *Owners) GroupsOf(ns string, uid types.UID) []string {
	objs, _ := o.groups.GetIndexer().ByIndex(byController, string(uid))
	var out []string
	for _, obj := range objs {
		if m, ok := obj.(metav1.Object); ok && m.GetNamespace() == ns {
			out = append(out, m.GetName())
		}
	}
	slices.Sort(out)
	return out
}
