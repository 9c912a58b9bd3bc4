package framework_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/gpufabric/gpufabric/test/integration/framework"
	"github.com/gpufabric/gpufabric/test/integration/itest"
)

// TestNodeHeartbeatStopped: with a 6 s node monitor grace period, a kwok
// node whose heartbeat StopNodeHeartbeat stopped goes Ready=Unknown and
// gets the node.kubernetes.io/unreachable NoExecute taint from
// kube-controller-manager within seconds, while its neighbour stays Ready
// and untainted (kwok renews healthy nodes' Leases within the short grace);
// ResumeNodeHeartbeat makes it Ready again without taints.
func TestNodeHeartbeatStopped(t *testing.T) {
	cp := framework.StartT(t, framework.Options{ControllerManager: true, Kwok: true, NodeMonitorGracePeriod: 6 * time.Second})
	ctx := t.Context()
	admin := cp.AdminClient(t)
	for _, name := range []string{"sick", "healthy"} {
		n := itest.Node(name, nil)
		n.Annotations = map[string]string{framework.KwokNodeAnnotation: "fake"}
		_, err := admin.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{})
		itest.Must(t, "create node", err)
	}
	for _, name := range []string{"sick", "healthy"} {
		itest.Poll(t, name+" ready and untainted", 60*time.Second, nodeIs(admin, name, corev1.ConditionTrue, false))
	}

	stopped := time.Now()
	itest.Must(t, "stop heartbeat", framework.StopNodeHeartbeat(ctx, admin, "sick"))
	itest.Poll(t, "sick Ready=Unknown and tainted unreachable:NoExecute", 40*time.Second, nodeIs(admin, "sick", corev1.ConditionUnknown, true))
	t.Logf("heartbeat stopped to node tainted unreachable: %v", time.Since(stopped).Round(100*time.Millisecond))
	if err := nodeIs(admin, "healthy", corev1.ConditionTrue, false)(ctx); err != nil {
		t.Errorf("the healthy node: %v", err)
	}

	itest.Must(t, "resume heartbeat", framework.ResumeNodeHeartbeat(ctx, admin, "sick"))
	itest.Poll(t, "sick ready and untainted again", 40*time.Second, nodeIs(admin, "sick", corev1.ConditionTrue, false))
}

// nodeIs checks a node's Ready status and whether it has the unreachable
// NoExecute taint (and, when it should not, no taint at all).
func nodeIs(c kubernetes.Interface, name string, ready corev1.ConditionStatus, unreachable bool) func(context.Context) error {
	return func(ctx context.Context) error {
		n, err := c.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		i := slices.IndexFunc(n.Status.Conditions, func(c corev1.NodeCondition) bool { return c.Type == corev1.NodeReady })
		if i < 0 || n.Status.Conditions[i].Status != ready {
			return fmt.Errorf("node %s conditions %v, want Ready=%s", name, n.Status.Conditions, ready)
		}
		has := slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool {
			return t.Key == corev1.TaintNodeUnreachable && t.Effect == corev1.TaintEffectNoExecute
		})
		if has != unreachable || !unreachable && len(n.Spec.Taints) > 0 {
			return fmt.Errorf("node %s taints %v, want unreachable:NoExecute %v", name, n.Spec.Taints, unreachable)
		}
		return nil
	}
}
