package itest

import (
	"context"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	"github.com/gpufabric/gpufabric/test/integration/framework"
)

// Faults under running gangs: nodes that stop heartbeating, get a NoExecute
// taint or are deleted, and member pods that fail. Each is what the API
// would see from the real thing.

// NodeFault is one way a node fails under its pods.
type NodeFault string

// The node faults.
const (
	// FaultNotReady stops the node's heartbeat (framework.StopNodeHeartbeat):
	// kube-controller-manager marks it Ready=Unknown and taints it
	// node.kubernetes.io/unreachable:NoExecute after its grace period.
	FaultNotReady NodeFault = "not-ready"
	// FaultTaint puts FaultTaintKey:NoExecute on the node (an operator's
	// drain, a health checker's verdict).
	FaultTaint NodeFault = "taint"
	// FaultDelete deletes the node and its node-local ResourceSlices (the
	// garbage collector deletes a DRA driver's slices with their Node).
	FaultDelete NodeFault = "delete"
)

// NodeFaults are all node faults.
var NodeFaults = []NodeFault{FaultNotReady, FaultTaint, FaultDelete}

// FaultTaintKey is the key of the NoExecute taint FaultTaint puts on nodes.
const FaultTaintKey = "health.example.com/broken"

// InjectNodeFault makes node fail as f says.
func InjectNodeFault(ctx context.Context, c kubernetes.Interface, node string, f NodeFault) error {
	switch f {
	case FaultNotReady:
		return framework.StopNodeHeartbeat(ctx, c, node)
	case FaultTaint:
		return TaintNode(ctx, c, node, corev1.Taint{Key: FaultTaintKey, Value: "true", Effect: corev1.TaintEffectNoExecute})
	case FaultDelete:
		return DeleteNode(ctx, c, node)
	}
	return fmt.Errorf("unknown node fault %q", f)
}

// RepairNode undoes f on node: the heartbeat resumes, the taint goes, or
// the node comes back (a kwok node of gpus GPUs in NVLink domain domain, as
// KwokFabric creates them). It does not wait for the node to be Ready.
func RepairNode(ctx context.Context, c kubernetes.Interface, node, domain string, gpus int, f NodeFault) error {
	switch f {
	case FaultNotReady:
		return framework.ResumeNodeHeartbeat(ctx, c, node)
	case FaultTaint:
		return UntaintNode(ctx, c, node, FaultTaintKey)
	case FaultDelete:
		n := Node(node, map[string]string{corev1.LabelHostname: node})
		n.Annotations = map[string]string{framework.KwokNodeAnnotation: "fake"}
		if _, err := c.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create node %s again: %w", node, err)
		}
		if _, err := c.ResourceV1().ResourceSlices().Create(ctx, GPUSlice(node, domain, gpus), metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create the slice of node %s again: %w", node, err)
		}
		return nil
	}
	return fmt.Errorf("unknown node fault %q", f)
}

// TaintNode adds taint to node (replacing one of the same key and effect).
func TaintNode(ctx context.Context, c kubernetes.Interface, node string, taint corev1.Taint) error {
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := c.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		n.Spec.Taints = slices.DeleteFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.MatchTaint(&taint) })
		taint.TimeAdded = &metav1.Time{Time: time.Now()}
		n.Spec.Taints = append(n.Spec.Taints, taint)
		_, err = c.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("taint node %s %s:%s: %w", node, taint.Key, taint.Effect, err)
	}
	return nil
}

// UntaintNode removes the taints of key from node.
func UntaintNode(ctx context.Context, c kubernetes.Interface, node, key string) error {
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := c.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		kept := slices.DeleteFunc(slices.Clone(n.Spec.Taints), func(t corev1.Taint) bool { return t.Key == key })
		if len(kept) == len(n.Spec.Taints) {
			return nil
		}
		n.Spec.Taints = kept
		_, err = c.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("untaint node %s %s: %w", node, key, err)
	}
	return nil
}

// DeleteNode deletes node and the ResourceSlices of its node-local pools
// (a DRA driver's slices are owned by their Node; the garbage collector
// deletes them with it, which the test slices of KwokFabric are not).
func DeleteNode(ctx context.Context, c kubernetes.Interface, node string) error {
	if err := c.CoreV1().Nodes().Delete(ctx, node, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete node %s: %w", node, err)
	}
	slices, err := c.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		return fmt.Errorf("list the slices of node %s: %w", node, err)
	}
	for _, s := range slices.Items {
		if err := c.ResourceV1().ResourceSlices().Delete(ctx, s.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete slice %s of node %s: %w", s.Name, node, err)
		}
	}
	return nil
}

// FailPod marks a running pod Failed as its kubelet would when its
// container exits with an error under restartPolicy Never: phase Failed,
// the container terminated with exit code 1, Ready False.
func FailPod(ctx context.Context, c kubernetes.Interface, ns, name string) error {
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		p, err := c.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		now := metav1.Now()
		p.Status.Phase = corev1.PodFailed
		p.Status.ContainerStatuses = nil
		for _, ctr := range p.Spec.Containers {
			p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, corev1.ContainerStatus{
				Name: ctr.Name, Image: ctr.Image,
				State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, Reason: "Error", FinishedAt: now}},
			})
		}
		for i := range p.Status.Conditions {
			if t := p.Status.Conditions[i].Type; t == corev1.PodReady || t == corev1.ContainersReady {
				p.Status.Conditions[i].Status, p.Status.Conditions[i].LastTransitionTime = corev1.ConditionFalse, now
			}
		}
		_, err = c.CoreV1().Pods(ns).UpdateStatus(ctx, p, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("fail pod %s/%s: %w", ns, name, err)
	}
	return nil
}
