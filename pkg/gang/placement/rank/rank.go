// Package rank orders a gang's pods the way their workload controllers
// number them (an Indexed Job's completion index, JobSet's global job
// index, LeaderWorkerSet's group and worker index, ...), then by a
// numeric name suffix: the order in which the engine fills nodes, so that
// consecutive ranks share a node. A leaf of the engine: a pod in, a number
// out.
package rank

import (
	"cmp"
	"slices"
	"strconv"
	"strings"

	v1 "k8s.io/api/core/v1"
)

// keys are the labels (or annotations) by which workload controllers
// number their pods, each list an index tuple, outermost first. The first
// list a pod carries in full is its rank.
var keys = [][]string{
	// JobSet: the child Job's index across the JobSet, then the pod's
	// completion index in that Job.
	{"jobset.sigs.k8s.io/job-global-index", "batch.kubernetes.io/job-completion-index"},
	// LeaderWorkerSet: the group, then the worker in it.
	{"leaderworkerset.sigs.k8s.io/group-index", "leaderworkerset.sigs.k8s.io/worker-index"},
	// Indexed Job.
	{"batch.kubernetes.io/job-completion-index"},
	// Kubeflow training operators and MPIJob.
	{"training.kubeflow.org/replica-index"},
}

// KubeRay's labels: a RayCluster's head comes first, then its workers by
// their index in their worker group (the hosts of a multi-host replica by
// their host index). Worker groups are not numbered: two groups' workers
// of one index are ordered by name.
const (
	labelRayNodeType     = "ray.io/node-type"
	labelRayReplicaIndex = "ray.io/worker-group-replica-index"
	labelRayHostIndex    = "ray.io/replica-host-index"
)

// Of returns a pod's rank: KubeRay's order, else the index tuple of the
// first keys list it carries, else nil.
func Of(p *v1.Pod) []int64 {
	switch p.Labels[labelRayNodeType] {
	case "head":
		return []int64{0}
	case "worker":
		if r, ok := labelIndex(p, labelRayReplicaIndex); ok {
			h, _ := labelIndex(p, labelRayHostIndex)
			return []int64{1, r, h}
		}
	}
	for _, keys := range keys {
		var r []int64
		for _, k := range keys {
			v, ok := p.Labels[k]
			if !ok {
				v, ok = p.Annotations[k]
			}
			n, err := strconv.ParseInt(v, 10, 64)
			if !ok || err != nil || n < 0 {
				break
			}
			r = append(r, n)
		}
		if len(r) == len(keys) {
			return r
		}
	}
	return nil
}

// labelIndex reads a non-negative integer label.
func labelIndex(p *v1.Pod, key string) (int64, bool) {
	n, err := strconv.ParseInt(p.Labels[key], 10, 64)
	return n, err == nil && n >= 0
}

// Compare orders a gang's pods by rank: pods with a rank first, by
// rank; then by name with a trailing number compared as a number
// ("w-2" before "w-10"); the name last, so the order is total. Consecutive
// ranks are placed next to each other: the engine fills a node with
// members in this order before it moves to the next.
func Compare(a, b *v1.Pod) int {
	ra, rb := Of(a), Of(b)
	switch {
	case ra != nil && rb != nil:
		if c := slices.Compare(ra, rb); c != 0 {
			return c
		}
	case ra != nil:
		return -1
	case rb != nil:
		return 1
	}
	pa, na, oka := numericSuffix(a.Name)
	pb, nb, okb := numericSuffix(b.Name)
	if oka && okb && pa == pb && na != nb {
		return cmp.Compare(na, nb)
	}
	return strings.Compare(a.Name, b.Name)
}

// numericSuffix splits "worker-12" into "worker-" and 12.
func numericSuffix(name string) (string, uint64, bool) {
	i := len(name)
	for i > 0 && name[i-1] >= '0' && name[i-1] <= '9' {
		i--
	}
	if i == len(name) || len(name)-i > 18 {
		return name, 0, false
	}
	n, err := strconv.ParseUint(name[i:], 10, 64)
	return name[:i], n, err == nil
}
