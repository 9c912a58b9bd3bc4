package scheduler

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/gpufabric/gpufabric/pkg/gang/scheduler"
	"github.com/gpufabric/gpufabric/test/integration/itest"
)

// TestSchedulerOwnStatusWriteDoesNotRetry: a refused gang's members get
// PodScheduled=False from the scheduler; those status writes come back as
// pod updates, and, as in kube-scheduler (isPodUpdated), they do not wake
// the gang: it is refused once, not a second time right after its own
// write (which also doubled its backoff). A change of a member's spec or
// metadata still wakes it.
func TestSchedulerOwnStatusWriteDoesNotRetry(t *testing.T) {
	const ns = "own-status"
	admin, reg := shortCluster(t, ns, scheduler.Config{})
	refused := holderAndWaiter(t, admin, reg, ns, 1)
	waitPodUnschedulable(t, admin, ns, "waiter-0")
	if n := settleCount(t, refused, 2*time.Second); n != 1 {
		t.Fatalf("refused %v times after its members were told, want 1: its own status write woke it", n)
	}
	patch := []byte(`{"metadata":{"labels":{"example.com/touched":"yes"}}}`)
	_, err := admin.CoreV1().Pods(ns).Patch(t.Context(), "waiter-0", types.MergePatchType, patch, metav1.PatchOptions{})
	itest.Must(t, "label member", err)
	itest.Poll(t, "refused again after a member's labels changed", 30*time.Second, func(context.Context) error {
		if n := refused(); n != 2 {
			return fmt.Errorf("refused %v times, want 2", n)
		}
		return nil
	})
}

// waitPodUnschedulable waits until the scheduler has written
// PodScheduled=False (Unschedulable) on the pod.
func waitPodUnschedulable(t *testing.T, c kubernetes.Interface, ns, name string) {
	t.Helper()
	itest.Poll(t, "pod "+name+" told it is unschedulable", 30*time.Second, func(ctx context.Context) error {
		p, err := c.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, cond := range p.Status.Conditions {
			if cond.Type == corev1.PodScheduled && cond.Status == corev1.ConditionFalse && cond.Reason == corev1.PodReasonUnschedulable {
				return nil
			}
		}
		return fmt.Errorf("conditions %+v", p.Status.Conditions)
	})
}
