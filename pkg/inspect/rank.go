package inspect

import (
	"regexp"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// Index labels that workload controllers put on their pods.
const (
	LabelJobCompletionIndex = "batch.kubernetes.io/job-completion-index"
	LabelJobSetGlobalIndex  = "jobset.sigs.k8s.io/job-global-index"
	LabelLWSGroupIndex      = "leaderworkerset.sigs.k8s.io/group-index"
	LabelLWSWorkerIndex     = "leaderworkerset.sigs.k8s.io/worker-index"
	LabelKubeflowType       = "training.kubeflow.org/replica-type"
	LabelKubeflowIndex      = "training.kubeflow.org/replica-index"
	LabelPodIndex           = "apps.kubernetes.io/pod-index"
	LabelRayNodeType        = "ray.io/node-type"
	LabelRayReplicaIndex    = "ray.io/worker-group-replica-index"
)

var numericSuffix = regexp.MustCompile(`-([0-9]+)$`)

// Rank returns a pod's rank in its gang as text, "" when it has none:
//   - JobSet: "<job-global-index>/<job-completion-index>";
//   - Indexed Job: the completion index;
//   - LeaderWorkerSet: "<group-index>/<worker-index>";
//   - Kubeflow training operators: "<replica-type>/<replica-index>";
//   - KubeRay: "0" for the head, "1/<worker-group-replica-index>" for a
//     worker (the scheduler's order: the head first);
//   - StatefulSet: the pod index;
//   - otherwise the numeric suffix of the pod's name ("train-3": 3).
func Rank(p *corev1.Pod) string {
	l := p.Labels
	switch l[LabelRayNodeType] {
	case "head":
		return "0"
	case "worker":
		if i, ok := l[LabelRayReplicaIndex]; ok {
			return "1/" + i
		}
	}
	pairs := []struct{ outer, inner string }{
		{LabelJobSetGlobalIndex, LabelJobCompletionIndex},
		{"", LabelJobCompletionIndex},
		{LabelLWSGroupIndex, LabelLWSWorkerIndex},
		{LabelKubeflowType, LabelKubeflowIndex},
		{"", LabelPodIndex},
	}
	for _, pair := range pairs {
		inner, ok := l[pair.inner]
		if !ok {
			continue
		}
		if pair.outer == "" {
			return inner
		}
		if outer, ok := l[pair.outer]; ok {
			return strings.ToLower(outer) + "/" + inner
		}
	}
	if m := numericSuffix.FindStringSubmatch(p.Name); m != nil {
		return m[1]
	}
	return ""
}

// rankLess orders ranks part by part ("/"-separated), numbers as numbers;
// a pod without rank goes last.
func rankLess(a, b string) bool {
	if a == "" || b == "" {
		return a != "" && b == ""
	}
	pa, pb := strings.Split(a, "/"), strings.Split(b, "/")
	for i := 0; i < len(pa) && i < len(pb); i++ {
		if pa[i] == pb[i] {
			continue
		}
		na, errA := strconv.Atoi(pa[i])
		nb, errB := strconv.Atoi(pb[i])
		if errA == nil && errB == nil {
			return na < nb
		}
		return pa[i] < pb[i]
	}
	return len(pa) < len(pb)
}
