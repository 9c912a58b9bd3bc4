package grouping

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Kind names a kind of workload the grouper makes gangs for.
type Kind string

const (
	KindJobSet                   Kind = "JobSet"
	KindLeaderWorkerSet          Kind = "LeaderWorkerSet"
	KindRayCluster               Kind = "RayCluster"
	KindJob                      Kind = "Job"
	KindSchedulerPluginsPodGroup Kind = "PodGroup.scheduling.x-k8s.io"
	KindVolcanoPodGroup          Kind = "PodGroup.scheduling.volcano.sh"
)

// KindInfo is where a kind is served and what its gangs are called.
type KindInfo struct {
	Kind Kind
	// GVR is the resource the grouper watches (when discovery says it is
	// served).
	GVR schema.GroupVersionResource
	// GVK is its kind, for owner references.
	GVK schema.GroupVersionKind
	// Prefix starts the names of its groups (PodRules).
	Prefix string
	// Parents are kinds whose objects may own one of this kind and whose
	// gpufabric annotations apply when the object itself has none (a
	// TrainJob's JobSet, a RayJob's RayCluster). Read only when served.
	Parents []schema.GroupVersionResource
}

// Resources the grouper reads besides the workloads (parents).
var (
	GVRTrainJob = schema.GroupVersionResource{Group: "trainer.kubeflow.org", Version: "v1alpha1", Resource: "trainjobs"}
	GVRRayJob   = schema.GroupVersionResource{Group: "ray.io", Version: "v1", Resource: "rayjobs"}
)

// Kinds lists every kind the grouper supports, in the order it starts
// watching them.
func Kinds() []KindInfo {
	return []KindInfo{
		{Kind: KindJobSet, Prefix: PrefixJobSet,
			GVR: schema.GroupVersionResource{Group: "jobset.x-k8s.io", Version: "v1alpha2", Resource: "jobsets"},
			GVK: schema.GroupVersionKind{Group: "jobset.x-k8s.io", Version: "v1alpha2", Kind: "JobSet"}, Parents: []schema.GroupVersionResource{GVRTrainJob}},
		{Kind: KindLeaderWorkerSet, Prefix: PrefixLWS,
			GVR: schema.GroupVersionResource{Group: "leaderworkerset.x-k8s.io", Version: "v1", Resource: "leaderworkersets"},
			GVK: schema.GroupVersionKind{Group: "leaderworkerset.x-k8s.io", Version: "v1", Kind: "LeaderWorkerSet"}},
		{Kind: KindRayCluster, Prefix: PrefixRay,
			GVR: schema.GroupVersionResource{Group: "ray.io", Version: "v1", Resource: "rayclusters"},
			GVK: schema.GroupVersionKind{Group: "ray.io", Version: "v1", Kind: "RayCluster"}, Parents: []schema.GroupVersionResource{GVRRayJob}},
		{Kind: KindJob, Prefix: PrefixJob,
			GVR: schema.GroupVersionResource{Group: "batch", Version: "v1", Resource: "jobs"},
			GVK: schema.GroupVersionKind{Group: "batch", Version: "v1", Kind: "Job"}},
		{Kind: KindSchedulerPluginsPodGroup, Prefix: PrefixSchedulerPlugins,
			GVR: schema.GroupVersionResource{Group: "scheduling.x-k8s.io", Version: "v1alpha1", Resource: "podgroups"},
			GVK: schema.GroupVersionKind{Group: "scheduling.x-k8s.io", Version: "v1alpha1", Kind: "PodGroup"}},
		{Kind: KindVolcanoPodGroup, Prefix: PrefixVolcano,
			GVR: schema.GroupVersionResource{Group: "scheduling.volcano.sh", Version: "v1beta1", Resource: "podgroups"},
			GVK: schema.GroupVersionKind{Group: "scheduling.volcano.sh", Version: "v1beta1", Kind: "PodGroup"}},
	}
}

// InfoOf returns the KindInfo of k.
func InfoOf(k Kind) (KindInfo, bool) {
	for _, i := range Kinds() {
		if i.Kind == k {
			return i, true
		}
	}
	return KindInfo{}, false
}

// KindOfGroupKind returns the kind whose objects have this API group and
// kind ("" when none).
func KindOfGroupKind(gk schema.GroupKind) Kind {
	for _, i := range Kinds() {
		if i.GVK.GroupKind() == gk {
			return i.Kind
		}
	}
	return ""
}
