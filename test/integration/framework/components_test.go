package framework_test

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/gpufabric/gpufabric/test/integration/framework"
	"github.com/gpufabric/gpufabric/test/integration/itest"
)

// TestOptionalComponents proves kube-controller-manager and kwok come up and
// act: a new namespace gets its default ServiceAccount from KCM, and a node
// annotated for kwok becomes Ready.
func TestOptionalComponents(t *testing.T) {
	cp := framework.StartT(t, framework.Options{ControllerManager: true, Kwok: true})
	ctx := t.Context()
	admin := cp.AdminClient(t)

	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "components"}}
	_, err := admin.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{})
	itest.Must(t, "create namespace", err)
	n := itest.Node("kwok-node-0", nil)
	n.Annotations = map[string]string{framework.KwokNodeAnnotation: "fake"}
	_, err = admin.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{})
	itest.Must(t, "create node", err)

	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := admin.CoreV1().ServiceAccounts(ns.Name).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	})
	itest.Must(t, "wait for KCM to create the default service account", err)

	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		got, err := admin.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, c := range got.Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
				return true, nil
			}
		}
		return false, nil
	})
	itest.Must(t, "wait for kwok to make the node Ready", err)
}
