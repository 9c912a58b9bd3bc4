package scheduler

import (
	"strings"

	v1 "k8s.io/api/core/v1"

	"github.com/gpufabric/gpufabric/pkg/topology"
)

// Gang keys: "pg:<namespace>/<name>" for a PodGroup, "pod:<namespace>/<name>"
// for a pod without one (a gang of one).
const (
	podGroupKeyPrefix = "pg:"
	podKeyPrefix      = "pod:"
)

// schedulerName is the reporting controller of events and the field manager
// of writes.
const schedulerName = topology.SchedulerName

func podGroupKey(namespace, name string) string { return podGroupKeyPrefix + namespace + "/" + name }

// gangKeyOf returns the key of the gang a pod belongs to.
func gangKeyOf(p *v1.Pod) string {
	if g := podGroupName(p); g != "" {
		return podGroupKey(p.Namespace, g)
	}
	return podKeyPrefix + p.Namespace + "/" + p.Name
}

// splitKey returns whether the key is a PodGroup's, and its namespace and
// name.
func splitKey(key string) (isGroup bool, namespace, name string) {
	rest, isGroup := strings.CutPrefix(key, podGroupKeyPrefix)
	if !isGroup {
		rest = strings.TrimPrefix(key, podKeyPrefix)
	}
	namespace, name, _ = strings.Cut(rest, "/")
	return isGroup, namespace, name
}

func podGroupName(p *v1.Pod) string {
	if p.Spec.SchedulingGroup == nil || p.Spec.SchedulingGroup.PodGroupName == nil {
		return ""
	}
	return *p.Spec.SchedulingGroup.PodGroupName
}

// ours reports whether the scheduler schedules the pod.
func ours(p *v1.Pod) bool { return p.Spec.SchedulerName == topology.SchedulerName }

// pending reports whether a pod of ours waits for a node: unbound, not
// terminating, not finished, and without scheduling gates (a gated pod is
// not placed until its gates are removed, as in kube-scheduler).
func pending(p *v1.Pod) bool {
	return ours(p) && p.Spec.NodeName == "" && p.DeletionTimestamp == nil && !terminated(p) && len(p.Spec.SchedulingGates) == 0
}

func terminated(p *v1.Pod) bool {
	return p.Status.Phase == v1.PodSucceeded || p.Status.Phase == v1.PodFailed
}
