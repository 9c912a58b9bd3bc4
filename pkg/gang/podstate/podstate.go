package podstate

import (
	v1 "k8s.io/api/core/v1"

	"github.com/gpufabric/gpufabric/pkg/topology"
)

// Ours reports whether gpufabric-scheduler schedules the pod.
func Ours(p *v1.Pod) bool { return p.Spec.SchedulerName == topology.SchedulerName }

// Pending reports whether a pod of ours waits for a node: unbound, not
// terminating, not finished, and without scheduling gates (a gated pod is
// not placed until its gates are removed, as in kube-scheduler).
func Pending(p *v1.Pod) bool {
	return Ours(p) && p.Spec.NodeName == "" && p.DeletionTimestamp == nil && !Terminated(p) && len(p.Spec.SchedulingGates) == 0
}

// Terminated reports whether a pod finished (succeeded or failed).
func Terminated(p *v1.Pod) bool {
	return p.Status.Phase == v1.PodSucceeded || p.Status.Phase == v1.PodFailed
}
