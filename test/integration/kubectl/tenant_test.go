package kubectl

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/gpufabric/gpufabric/pkg/gang/freeroom"
	"github.com/gpufabric/gpufabric/test/integration/framework"
)

// waitFreeRoom waits until the scheduler's free-room view shows free of
// gpus GPUs free.
func waitFreeRoom(t *testing.T, c kubernetes.Interface, gpus, free int) {
	t.Helper()
	poll(t, "free-room view published", 30*time.Second, func(ctx context.Context) error {
		cm, err := c.CoreV1().ConfigMaps(recordNamespace).Get(ctx, freeroom.ConfigMapName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		v, err := freeroom.Decode(cm)
		if err != nil {
			return err
		}
		if v.GPUs != gpus || v.FreeGPUs != free {
			return fmt.Errorf("view counts %d of %d GPUs free, want %d of %d", v.FreeGPUs, v.GPUs, free, gpus)
		}
		return nil
	})
}

// checkTenant: a tenant with rights on its own namespace only (pods and
// PodGroups of team-b), and the chart's reader rules bound to
// system:authenticated as the chart binds them, is denied listing nodes,
// reads the view, and `kubectl gpufabric status` shows it the view,
// saying why (golden testdata/status-tenant.golden).
func checkTenant(t *testing.T, cp *framework.ControlPlane) {
	ctx := t.Context()
	admin := cp.AdminClient(t)
	const user = "tenant-b"
	readers, err := framework.LoadRules(framework.FreeRoomReaderRulesFile)
	must(t, "load reader rules", err)
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "free-room-reader", Namespace: recordNamespace}, Rules: readers}
	_, err = admin.RbacV1().Roles(recordNamespace).Create(ctx, role, metav1.CreateOptions{})
	must(t, "create reader role", err)
	binding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "free-room-reader", Namespace: recordNamespace},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.GroupKind, Name: "system:authenticated"}}}
	_, err = admin.RbacV1().RoleBindings(recordNamespace).Create(ctx, binding, metav1.CreateOptions{})
	must(t, "bind reader role", err)
	must(t, "grant the tenant its namespace", framework.GrantNamespaceRules(ctx, admin, user, "team-b", []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{schedulingv1beta1.GroupName}, Resources: []string{"podgroups"}, Verbs: []string{"get", "list", "watch"}},
	}))
	rc, err := cp.UserConfig(user)
	must(t, "tenant config", err)
	tenant, err := kubernetes.NewForConfig(rc)
	must(t, "tenant client", err)

	if _, err := tenant.CoreV1().Nodes().List(ctx, metav1.ListOptions{Limit: 1}); !apierrors.IsForbidden(err) {
		t.Errorf("tenant lists nodes: %v, want forbidden", err)
	}
	if _, err := tenant.CoreV1().ConfigMaps(recordNamespace).Get(ctx, "kube-root-ca.crt", metav1.GetOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("tenant reads another ConfigMap of the scheduler's namespace: %v, want forbidden", err)
	}
	cm, err := tenant.CoreV1().ConfigMaps(recordNamespace).Get(ctx, freeroom.ConfigMapName, metav1.GetOptions{})
	must(t, "tenant reads the view", err)
	v, err := freeroom.Decode(cm)
	must(t, "decode the view", err)
	if v.FreeGPUs != 7 || len(v.Levels) != 3 || v.Levels[0].LargestFree != 7 {
		t.Errorf("tenant's view: %+v, want 7 free GPUs, 7 in dom-b, 3 levels", v)
	}
	kubeconfig, err := cp.WriteUserKubeconfig(user)
	must(t, "tenant kubeconfig", err)
	out, errOut, err := runPluginAs(t, kubeconfig, "status", "--scheduler-namespace="+recordNamespace)
	if err != nil {
		t.Fatalf("kubectl gpufabric status as the tenant: %v\n%s", err, errOut)
	}
	if !strings.Contains(out, `User "tenant-b" cannot list resource "nodes"`) {
		t.Errorf("status as the tenant does not say why it falls back:\n%s", out)
	}
	compareGolden(t, filepath.Join("testdata", "status-tenant.golden"), mask(out))
	if _, _, err := runPluginAs(t, kubeconfig, "status", "--scheduler-namespace=elsewhere"); err == nil ||
		!strings.Contains(err.Error(), "the free-room view elsewhere/gpufabric-free-room cannot be read either") {
		t.Errorf("status as the tenant without a readable view: %v, want both errors", err)
	}
}
