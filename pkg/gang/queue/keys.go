package queue

import (
	v1 "k8s.io/api/core/v1"

	"github.com/gpufabric/gpufabric/pkg/gang/vocab"
)

// Gang keys: "pg:<namespace>/<name>" for a PodGroup, "pod:<namespace>/<name>"
// for a pod without one (a gang of one). The format is vocab's: the
// nomination records the evict room writes store these keys.
const (
	PodGroupKeyPrefix = vocab.PodGroupKeyPrefix
	PodKeyPrefix      = vocab.PodKeyPrefix
)

// PodGroupKey returns the key of a PodGroup's gang.
func PodGroupKey(namespace, name string) string { return vocab.PodGroupKey(namespace, name) }

// KeyOf returns the key of the gang a pod belongs to.
func KeyOf(p *v1.Pod) string {
	if g := PodGroupName(p); g != "" {
		return vocab.PodGroupKey(p.Namespace, g)
	}
	return vocab.PodKey(p.Namespace, p.Name)
}

// SplitKey returns whether the key is a PodGroup's, and its namespace and
// name.
func SplitKey(key string) (isGroup bool, namespace, name string) { return vocab.SplitKey(key) }

// PodGroupName returns the name of the PodGroup a pod belongs to, "" for
// none.
func PodGroupName(p *v1.Pod) string {
	if p.Spec.SchedulingGroup == nil || p.Spec.SchedulingGroup.PodGroupName == nil {
		return ""
	}
	return *p.Spec.SchedulingGroup.PodGroupName
}
