package queue

import (
	"strings"

	v1 "k8s.io/api/core/v1"
)

// Gang keys: "pg:<namespace>/<name>" for a PodGroup, "pod:<namespace>/<name>"
// for a pod without one (a gang of one).
const (
	PodGroupKeyPrefix = "pg:"
	PodKeyPrefix      = "pod:"
)

// PodGroupKey returns the key of a PodGroup's gang.
func PodGroupKey(namespace, name string) string { return PodGroupKeyPrefix + namespace + "/" + name }

// KeyOf returns the key of the gang a pod belongs to.
func KeyOf(p *v1.Pod) string {
	if g := PodGroupName(p); g != "" {
		return PodGroupKey(p.Namespace, g)
	}
	return PodKeyPrefix + p.Namespace + "/" + p.Name
}

// SplitKey returns whether the key is a PodGroup's, and its namespace and
// name.
func SplitKey(key string) (isGroup bool, namespace, name string) {
	rest, isGroup := strings.CutPrefix(key, PodGroupKeyPrefix)
	if !isGroup {
		rest = strings.TrimPrefix(key, PodKeyPrefix)
	}
	namespace, name, _ = strings.Cut(rest, "/")
	return isGroup, namespace, name
}

// PodGroupName returns the name of the PodGroup a pod belongs to, "" for
// none.
func PodGroupName(p *v1.Pod) string {
	if p.Spec.SchedulingGroup == nil || p.Spec.SchedulingGroup.PodGroupName == nil {
		return ""
	}
	return *p.Spec.SchedulingGroup.PodGroupName
}
