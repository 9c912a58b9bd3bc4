package framework

import (
	"context"
	"fmt"
	"slices"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
)

// Node failures the realistic way: a kwok node stops heartbeating, and
// kube-controller-manager's node lifecycle controller notices as it would a
// dead kubelet (Ready=Unknown after its --node-monitor-grace-period, then
// the node.kubernetes.io/unreachable NoExecute taint).

// FaultLeaseHolder holds the node Leases taken from kwok by
// StopNodeHeartbeat.
const FaultLeaseHolder = "gpufabric-fault-injector"

// faultLeaseSeconds is the duration of a taken Lease: kwok does not take a
// Lease back before it expires, so for an hour it leaves the node alone.
const faultLeaseSeconds = 3600

// HeartbeatStoppedTaint is the NoSchedule taint StopNodeHeartbeat puts on
// the node. kwok plays a stage job it queued before the take-over once
// more (its job queue does not check that it still holds the Lease): the
// node's status is patched Ready with a fresh heartbeat ~20 s later, and
// kube-controller-manager lifts its unreachable taints until the grace
// runs out again. A dead kubelet never does that; this taint keeps the
// node as unschedulable through that blip as KCM's
// node.kubernetes.io/unreachable:NoSchedule keeps it otherwise.
const HeartbeatStoppedTaint = "test.gpufabric.dev/heartbeat-stopped"

// StopNodeHeartbeat makes a kwok node stop heartbeating: its Lease in
// kube-node-lease is taken from kwok (held by FaultLeaseHolder for an hour,
// renewed never), so kwok neither renews it nor updates the node or runs
// its pods' lifecycle any more (but see HeartbeatStoppedTaint, which it
// also puts on the node). kube-controller-manager marks the node
// Ready=Unknown once its node monitor grace period passed without a
// renewal (Options.NodeMonitorGracePeriod) and taints it unreachable. The
// node's pods stay as they are (Running), as on a node that lost its
// kubelet. ResumeNodeHeartbeat undoes it.
func StopNodeHeartbeat(ctx context.Context, c kubernetes.Interface, node string) error {
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		lease, err := c.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		lease.Spec.HolderIdentity = ptr.To(FaultLeaseHolder)
		lease.Spec.LeaseDurationSeconds = ptr.To[int32](faultLeaseSeconds)
		// The take-over is the node's last renewal: the grace counts from it.
		lease.Spec.RenewTime = &metav1.MicroTime{Time: time.Now()}
		_, err = c.CoordinationV1().Leases(corev1.NamespaceNodeLease).Update(ctx, lease, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("take the lease of node %s from kwok: %w", node, err)
	}
	return setTaint(ctx, c, node, &corev1.Taint{Key: HeartbeatStoppedTaint, Effect: corev1.TaintEffectNoSchedule})
}

// setTaint puts taint on node (nil: removes the taints of key
// HeartbeatStoppedTaint).
func setTaint(ctx context.Context, c kubernetes.Interface, node string, taint *corev1.Taint) error {
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := c.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		n.Spec.Taints = slices.DeleteFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == HeartbeatStoppedTaint })
		if taint != nil {
			n.Spec.Taints = append(n.Spec.Taints, *taint)
		}
		_, err = c.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
		return err
	})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("taint node %s %s: %w", node, HeartbeatStoppedTaint, err)
	}
	return nil
}

// ResumeNodeHeartbeat gives a node's Lease back to kwok (deletes it; kwok
// creates it again, renews it, and makes the node Ready). The node lifecycle
// controller then removes its unreachable taints.
func ResumeNodeHeartbeat(ctx context.Context, c kubernetes.Interface, node string) error {
	lease, err := c.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, node, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return fmt.Errorf("get the lease of node %s: %w", node, err)
	case ptr.Deref(lease.Spec.HolderIdentity, "") != FaultLeaseHolder:
		return nil // kwok's already
	}
	err = c.CoordinationV1().Leases(corev1.NamespaceNodeLease).Delete(ctx, node, metav1.DeleteOptions{
		Preconditions: &metav1.Preconditions{UID: &lease.UID},
	})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("give the lease of node %s back to kwok: %w", node, err)
	}
	return setTaint(ctx, c, node, nil)
}

// HeartbeatStopped reports whether lease is one StopNodeHeartbeat took.
func HeartbeatStopped(lease *coordinationv1.Lease) bool {
	return ptr.Deref(lease.Spec.HolderIdentity, "") == FaultLeaseHolder
}
