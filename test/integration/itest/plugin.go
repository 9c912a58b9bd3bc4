package itest

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/gpufabric/gpufabric/test/integration/framework"
)

// Fixture fabrics of the mock backend the plugin tests run on (paths
// relative to the repository root).
const (
	GB200Fabric = "pkg/devices/mock/fabrics/gb200-nvl72x2.yaml"
	HGXFabric   = "pkg/devices/mock/fabrics/hgx-h100x8.yaml"
)

// PluginEnv starts a control plane, creates nodes, and grants the plugin's
// shipped RBAC rules to a plugin identity. It returns the admin client and
// the plugin's kubeconfig.
func PluginEnv(t *testing.T, nodes ...string) (*framework.ControlPlane, kubernetes.Interface, string) {
	t.Helper()
	cp := framework.StartT(t, framework.Options{})
	admin := cp.AdminClient(t)
	rules, err := framework.LoadRules(framework.PluginRulesFile)
	Must(t, "load plugin rules", err)
	for _, n := range nodes {
		_, err := admin.CoreV1().Nodes().Create(t.Context(), Node(n, nil), metav1.CreateOptions{})
		Must(t, "create node "+n, err)
	}
	return cp, admin, cp.KubeconfigWithRules(t, "gpufabric-plugin", rules)
}
