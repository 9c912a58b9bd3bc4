package gangless

import (
	"fmt"

	v1 "k8s.io/api/core/v1"

	"github.com/gpufabric/gpufabric/pkg/gang/report"
)

// Hint is why a pod looks like part of a gang, and what would make it one.
type Hint struct {
	// Source is the API or controller seen, e.g. "JobSet".
	Source string
	// Message says what was seen and what to change (bounded).
	Message string
}

// fix is what every hint ends with: how a pod joins a gpufabric gang.
const fix = "gpufabric-scheduler places it alone: to place the group all-or-nothing in one fabric domain, run gpufabric-grouper with its pod-group admission policy (chart values grouper.*), which gives JobSet, LeaderWorkerSet, RayCluster, Indexed Job, scheduler-plugins and Volcano pods their group unless they opted out (annotation gpufabric.dev/gang: \"false\"), or create a scheduling.k8s.io/v1beta1 PodGroup and name it in each pod's spec.schedulingGroup.podGroupName (docs/user-guide.md)"

// rule matches a pod by one label or annotation key.
type rule struct {
	source string
	key    string
	// annotation: the key is an annotation, else a label.
	annotation bool
	// what describes the value seen.
	what string
	// skip, when set, ignores some values.
	skip func(string) bool
}

// rules in order: gang APIs, then controllers.
var rules = []rule{
	{source: "scheduler-plugins", key: "scheduling.x-k8s.io/pod-group", what: "names scheduler-plugins PodGroup %s, which gpufabric-grouper translates into a gpufabric gang"},
	{source: "scheduler-plugins", key: "pod-group.scheduling.sigs.k8s.io", what: "names scheduler-plugins PodGroup %s, which gpufabric-grouper translates into a gpufabric gang"},
	{source: "Volcano", key: "scheduling.k8s.io/group-name", annotation: true, what: "names Volcano PodGroup %s, which gpufabric-grouper translates into a gpufabric gang"},
	{source: "KAI", key: "pod-group-name", annotation: true, what: "names KAI pod group %s, which gpufabric does not read"},
	{source: "Kueue", key: "kueue.x-k8s.io/pod-group-name", what: "is in Kueue pod group %s, which gpufabric does not read"},
	{source: "JobSet", key: "jobset.sigs.k8s.io/jobset-name", what: "belongs to JobSet %s"},
	{source: "LeaderWorkerSet", key: "leaderworkerset.sigs.k8s.io/name", what: "belongs to LeaderWorkerSet %s"},
	{source: "KubeRay", key: "ray.io/cluster", what: "belongs to RayCluster %s"},
	{source: "Kubeflow", key: "training.kubeflow.org/job-name", what: "belongs to Kubeflow training job %s"},
	{source: "Indexed Job", key: "batch.kubernetes.io/job-completion-index", what: "is completion index %s of an Indexed Job",
		skip: func(v string) bool { return v == "0" }},
}

// Of returns the hint of a pod that names no PodGroup, and whether it
// looks like part of a gang.
func Of(p *v1.Pod) (Hint, bool) {
	if p.Spec.SchedulingGroup != nil && p.Spec.SchedulingGroup.PodGroupName != nil {
		return Hint{}, false
	}
	for _, r := range rules {
		m := p.Labels
		if r.annotation {
			m = p.Annotations
		}
		v, ok := m[r.key]
		if !ok || v == "" || r.skip != nil && r.skip(v) {
			continue
		}
		return Hint{Source: r.source, Message: fmt.Sprintf("pod %s %s (%s): %s", report.Quote(p.Name, report.MaxQuoted), fmt.Sprintf(r.what, report.Quote(v, report.MaxQuoted)), r.key, fix)}, true
	}
	return Hint{}, false
}

// Untried reports whether the scheduler has not told the pod anything yet
// (no PodScheduled condition): the hint is recorded once, at the pod's
// first attempt, not at every retry.
func Untried(p *v1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == v1.PodScheduled {
			return false
		}
	}
	return true
}
