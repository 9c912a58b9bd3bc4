package itest

import (
	"context"
	"fmt"
	"github.com/gpufabric/gpufabric/pkg/gang/placement/scenario"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/gpufabric/gpufabric/pkg/topology"
	"github.com/gpufabric/gpufabric/test/integration/framework"
)

// Clusters of the scheduler tests: nodes named <domain>-<i>, each with a
// node-local slice of GPUs in NVLink domain dom-<domain>, and the device
// classes.

// FabricCluster creates nodes with a kubernetes.io/hostname label and a
// node-local slice of gpus GPUs each: domains × nodesPer nodes named
// <domain>-<i>, in NVLink domain dom-<domain>. Plus both device classes.
func FabricCluster(t *testing.T, c kubernetes.Interface, domains []string, nodesPer, gpus int) {
	t.Helper()
	ctx := t.Context()
	for _, dc := range []*resourceapi.DeviceClass{
		DeviceClass(topology.GPUDeviceClass, scenario.GPUSelector),
		DeviceClass(topology.FabricDomainDeviceClass, scenario.FabricDomainSelector),
	} {
		if _, err := c.ResourceV1().DeviceClasses().Create(ctx, dc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("create device class: %v", err)
		}
	}
	for _, d := range domains {
		for i := range nodesPer {
			name := fmt.Sprintf("%s-%d", d, i)
			_, err := c.CoreV1().Nodes().Create(ctx, Node(name, map[string]string{corev1.LabelHostname: name}), metav1.CreateOptions{})
			Must(t, "create node", err)
			_, err = c.ResourceV1().ResourceSlices().Create(ctx, GPUSlice(name, "dom-"+d, gpus), metav1.CreateOptions{})
			Must(t, "create slice", err)
		}
	}
}

// KwokFabric is FabricCluster with nodes whose lifecycle kwok runs (Ready,
// pods Running), as kube-scheduler needs.
func KwokFabric(t *testing.T, c kubernetes.Interface, domains []string, nodesPer, gpus int) {
	t.Helper()
	FabricCluster(t, c, nil, 0, 0) // device classes
	var names []string
	for _, d := range domains {
		for i := range nodesPer {
			name := fmt.Sprintf("%s-%d", d, i)
			n := Node(name, map[string]string{corev1.LabelHostname: name})
			n.Annotations = map[string]string{framework.KwokNodeAnnotation: "fake"}
			_, err := c.CoreV1().Nodes().Create(t.Context(), n, metav1.CreateOptions{})
			Must(t, "create node", err)
			_, err = c.ResourceV1().ResourceSlices().Create(t.Context(), GPUSlice(name, "dom-"+d, gpus), metav1.CreateOptions{})
			Must(t, "create slice", err)
			names = append(names, name)
		}
	}
	Poll(t, "kwok nodes ready", 60*time.Second, func(ctx context.Context) error {
		for _, name := range names {
			n, err := c.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if !NodeReady(n) || len(n.Spec.Taints) > 0 {
				return fmt.Errorf("node %s not ready or tainted %v", name, n.Spec.Taints)
			}
		}
		return nil
	})
}

// DeviceClass is a device class named name selecting devices by the CEL
// expression expr.
func DeviceClass(name, expr string) *resourceapi.DeviceClass {
	return &resourceapi.DeviceClass{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: expr}}}},
	}
}

// DomainOf returns the NVLink domain of a node named <domain>-<i> (as
// FabricCluster and KwokFabric name them).
func DomainOf(nodeName string) string {
	d, _, _ := strings.Cut(nodeName, "-")
	return "dom-" + d
}

// NodeReady reports whether n has condition Ready=True.
func NodeReady(n *corev1.Node) bool {
	return slices.ContainsFunc(n.Status.Conditions, func(c corev1.NodeCondition) bool {
		return c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue
	})
}

// UnevenDomains creates, for each domain d with n nodes, nodes d-0 … d-(n-1)
// (hostname labels only) each publishing gpus GPUs of NVLink domain dom-d.
func UnevenDomains(t *testing.T, admin kubernetes.Interface, nodes map[string]int, gpus int) {
	t.Helper()
	ctx := t.Context()
	for d, n := range nodes {
		for i := range n {
			name := fmt.Sprintf("%s-%d", d, i)
			_, err := admin.CoreV1().Nodes().Create(ctx, Node(name, map[string]string{corev1.LabelHostname: name}), metav1.CreateOptions{})
			Must(t, "create node", err)
			_, err = admin.ResourceV1().ResourceSlices().Create(ctx, GPUSlice(name, "dom-"+d, gpus), metav1.CreateOptions{})
			Must(t, "create slice", err)
		}
	}
}
