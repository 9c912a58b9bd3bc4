package grouping

import (
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// Mode is how a plan is materialized: flat (one PodGroup per gang, what
// gpufabric-scheduler places today) or composite (a CompositePodGroup over
// the PodGroups of the workload's roles, scheduling.k8s.io/v1alpha3).
type Mode string

const (
	ModeFlat      Mode = "flat"
	ModeComposite Mode = "composite"
)

// Labels and annotations the controllers and gang APIs put on pods. The
// mapping reads nothing else from a pod.
const (
	LabelJobSetName        = "jobset.sigs.k8s.io/jobset-name"
	LabelReplicatedJobName = "jobset.sigs.k8s.io/replicatedjob-name"
	LabelJobGlobalIndex    = "jobset.sigs.k8s.io/job-global-index"
	LabelLWSName           = "leaderworkerset.sigs.k8s.io/name"
	LabelLWSGroupIndex     = "leaderworkerset.sigs.k8s.io/group-index"
	LabelLWSWorkerIndex    = "leaderworkerset.sigs.k8s.io/worker-index"
	LabelRayCluster        = "ray.io/cluster"
	LabelRayGroup          = "ray.io/group"
	LabelRayNodeType       = "ray.io/node-type"
	// LabelRayOriginatedFrom and LabelRayOriginatedFromCRD are on a
	// RayJob's RayCluster: the RayJob's name, and "RayJob".
	LabelRayOriginatedFrom    = "ray.io/originated-from-cr-name"
	LabelRayOriginatedFromCRD = "ray.io/originated-from-crd"
	LabelJobName              = "batch.kubernetes.io/job-name"
	LabelJobCompletionIndex   = "batch.kubernetes.io/job-completion-index"
	// LabelSchedulerPluginsPodGroup names a scheduler-plugins PodGroup
	// (sigs.k8s.io/scheduler-plugins v0.33); LabelSchedulerPluginsPodGroupOld
	// is the key of its releases before v0.28.
	LabelSchedulerPluginsPodGroup    = "scheduling.x-k8s.io/pod-group"
	LabelSchedulerPluginsPodGroupOld = "pod-group.scheduling.sigs.k8s.io"
	// AnnotationVolcanoGroupName names a Volcano PodGroup.
	AnnotationVolcanoGroupName = "scheduling.k8s.io/group-name"
	// AnnotationGang = "false" on a pod (its template) keeps it out of any
	// group gpufabric makes: it is placed alone.
	AnnotationGang = "gpufabric.dev/gang"
)

// RayHeadGroup is the ray.io/group label of a RayCluster's head pod.
const RayHeadGroup = "headgroup"

// Source is one pod label, or annotation, the name of a group is made of.
type Source struct {
	Key        string
	Annotation bool
}

// PodRule maps a pod to the name of its group: Prefix, then the values of
// Parts, joined by ".". The rule applies when the pod carries Parts[0]
// (not empty); then every other part must be there too and the name a DNS
// subdomain, or the pod is grouped by no rule.
type PodRule struct {
	Kind   Kind
	Prefix string
	Parts  []Source
	// Require, when set, must be on the pod too (its value does not
	// matter): an Indexed Job's pods carry their completion index.
	Require string
}

// PodRules are the rules of mode, first match wins: gang APIs before
// controllers (the gang API is what the user asked for), JobSet before
// Job (a JobSet's pods carry their Job's labels too).
//
// Separators are dots: the name's parts are DNS labels or label values
// without dots where two parts meet (a JobSet and a replicated job are
// DNS labels), so two workloads never map to one name.
func PodRules(mode Mode) []PodRule {
	ray := []Source{{Key: LabelRayCluster}}
	if mode == ModeComposite {
		ray = append(ray, Source{Key: LabelRayGroup})
	}
	return []PodRule{
		{Kind: KindSchedulerPluginsPodGroup, Prefix: PrefixSchedulerPlugins, Parts: []Source{{Key: LabelSchedulerPluginsPodGroup}}},
		{Kind: KindSchedulerPluginsPodGroup, Prefix: PrefixSchedulerPlugins, Parts: []Source{{Key: LabelSchedulerPluginsPodGroupOld}}},
		{Kind: KindVolcanoPodGroup, Prefix: PrefixVolcano, Parts: []Source{{Key: AnnotationVolcanoGroupName, Annotation: true}}},
		{Kind: KindJobSet, Prefix: PrefixJobSet, Parts: []Source{{Key: LabelJobSetName}, {Key: LabelReplicatedJobName}}},
		{Kind: KindLeaderWorkerSet, Prefix: PrefixLWS, Parts: []Source{{Key: LabelLWSName}, {Key: LabelLWSGroupIndex}}},
		{Kind: KindRayCluster, Prefix: PrefixRay, Parts: ray},
		{Kind: KindJob, Prefix: PrefixJob, Parts: []Source{{Key: LabelJobName}}, Require: LabelJobCompletionIndex},
	}
}

// Name prefixes, one per kind of workload.
const (
	PrefixJobSet           = "jobset"
	PrefixLWS              = "lws"
	PrefixRay              = "ray"
	PrefixJob              = "job"
	PrefixSchedulerPlugins = "sp"
	PrefixVolcano          = "volcano"
)

// GroupName joins prefix and parts with "." and reports whether the result
// is a valid PodGroup name (a DNS subdomain of at most 253 characters).
func GroupName(prefix string, parts ...string) (string, bool) {
	name := prefix + "." + strings.Join(parts, ".")
	return name, len(validation.IsDNS1123Subdomain(name)) == 0
}

// GroupOfPod is the group a pod with these labels and annotations names
// (the admission policy sets it at creation; Policy is generated from the
// same rules), and the rule that matched; ok is false when no rule applies,
// a part is missing, the name is invalid or the pod opted out.
func GroupOfPod(mode Mode, labels, annotations map[string]string) (name string, rule PodRule, ok bool) {
	if annotations[AnnotationGang] == "false" {
		return "", PodRule{}, false
	}
	for _, r := range PodRules(mode) {
		first := value(r.Parts[0], labels, annotations)
		if first == "" {
			continue
		}
		if _, has := labels[r.Require]; r.Require != "" && !has {
			continue
		}
		parts := make([]string, 0, len(r.Parts))
		for _, s := range r.Parts {
			v := value(s, labels, annotations)
			if v == "" {
				return "", r, false
			}
			parts = append(parts, v)
		}
		name, valid := GroupName(r.Prefix, parts...)
		return name, r, valid
	}
	return "", PodRule{}, false
}

func value(s Source, labels, annotations map[string]string) string {
	if s.Annotation {
		return annotations[s.Key]
	}
	return labels[s.Key]
}
