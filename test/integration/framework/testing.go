package framework

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2/ktesting"
	"sigs.k8s.io/yaml"
)

// KeepFailedEnv names a folder: when set, a failed test's control-plane
// logs are copied there (one folder per test) before they are removed.
const KeepFailedEnv = "GPUFABRIC_KEEP_FAILED_LOGS"

// StartT starts a control plane for a test and stops it in t.Cleanup. When
// the test failed, the tail of every component's log goes to the test log.
func StartT(t testing.TB, opts Options) *ControlPlane {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithTimeout(ctx, 15*time.Minute) // cold binary builds included
	defer cancel()
	cp, err := Start(ctx, opts)
	if err != nil {
		t.Fatalf("start control plane: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("control plane logs:\n%s", cp.LogTails(15))
			if dir := os.Getenv(KeepFailedEnv); dir != "" {
				cp.stopProcesses()
				kept, err := cp.keepLogs(dir, t.Name())
				t.Logf("control plane logs kept in %s (%v)", kept, err)
			}
		}
		cp.Stop()
	})
	return cp
}

// AdminClient is a clientset for a cluster admin.
func (cp *ControlPlane) AdminClient(t testing.TB) kubernetes.Interface {
	t.Helper()
	c, err := kubernetes.NewForConfig(cp.AdminConfig())
	if err != nil {
		t.Fatalf("build admin client: %v", err)
	}
	return c
}

// ClientWithRules creates a ClusterRole with rules, binds it to a new user
// named user, and returns a clientset authenticated as that user. Nothing
// else is granted to it.
func (cp *ControlPlane) ClientWithRules(t testing.TB, user string, rules []rbacv1.PolicyRule) kubernetes.Interface {
	t.Helper()
	if err := GrantRules(t.Context(), cp.AdminClient(t), user, rules); err != nil {
		t.Fatal(err)
	}
	cfg, err := cp.UserConfig(user)
	if err != nil {
		t.Fatal(err)
	}
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatalf("build client for %s: %v", user, err)
	}
	return c
}

// GrantRules creates a ClusterRole named user with rules and binds it to
// the user of that name.
func GrantRules(ctx context.Context, admin kubernetes.Interface, user string, rules []rbacv1.PolicyRule) error {
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: user}, Rules: rules}
	if _, err := admin.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create cluster role %s: %w", user, err)
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: user},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: user},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}},
	}
	if _, err := admin.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create cluster role binding %s: %w", user, err)
	}
	return WaitGranted(ctx, admin, user, "", rules)
}

// LoadRules reads a YAML list of RBAC rules (the chart's files/rbac/*.yaml)
// relative to the repository root.
func LoadRules(relPath string) ([]rbacv1.PolicyRule, error) {
	root, err := RepoRoot()
	if err != nil {
		return nil, err
	}
	data, err := os.ReadFile(filepath.Join(root, relPath))
	if err != nil {
		return nil, fmt.Errorf("read rules: %w", err)
	}
	var doc struct {
		Rules []rbacv1.PolicyRule `json:"rules"`
	}
	if err := yaml.UnmarshalStrict(data, &doc); err != nil {
		return nil, fmt.Errorf("parse rules %s: %w", relPath, err)
	}
	if len(doc.Rules) == 0 {
		return nil, fmt.Errorf("parse rules %s: no rules", relPath)
	}
	return doc.Rules, nil
}

// KubeconfigWithRules is ClientWithRules for another process: it grants
// rules to a new user and writes a kubeconfig authenticating as that user.
// Returns the kubeconfig's path.
func (cp *ControlPlane) KubeconfigWithRules(t testing.TB, user string, rules []rbacv1.PolicyRule) string {
	t.Helper()
	cp.ClientWithRules(t, user, rules)
	path, err := cp.WriteUserKubeconfig(user)
	if err != nil {
		t.Fatal(err)
	}
	return path
}

// keepLogs copies the control plane's *.log files into a new folder
// under dir named after the test, and returns that folder.
func (cp *ControlPlane) keepLogs(dir, test string) (string, error) {
	into, err := os.MkdirTemp(dir, strings.NewReplacer("/", "_", " ", "_").Replace(test)+"-")
	if err != nil {
		return "", err
	}
	logs, err := filepath.Glob(filepath.Join(cp.dir, "*.log"))
	if err != nil {
		return into, err
	}
	for _, f := range logs {
		b, err := os.ReadFile(f)
		if err != nil {
			return into, err
		}
		if err := os.WriteFile(filepath.Join(into, filepath.Base(f)), b, 0o644); err != nil {
			return into, err
		}
	}
	return into, nil
}
