package itest

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/gpufabric/gpufabric/test/integration/framework"
)

// EndpointTokenNamespace holds the service accounts EndpointToken makes.
const EndpointTokenNamespace = "default"

// EndpointToken makes a ServiceAccount name (namespace
// EndpointTokenNamespace) that RBAC lets get the non-resource URLs paths
// (none: a token with no right at all) and returns a token of it, as a
// Prometheus would scrape the metrics ports with.
func EndpointToken(t testing.TB, admin kubernetes.Interface, name string, paths ...string) string {
	t.Helper()
	ctx := t.Context()
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: EndpointTokenNamespace}}
	_, err := admin.CoreV1().ServiceAccounts(EndpointTokenNamespace).Create(ctx, sa, metav1.CreateOptions{})
	Must(t, "create service account "+name, err)
	if len(paths) > 0 {
		role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "endpoints-" + name},
			Rules: []rbacv1.PolicyRule{{NonResourceURLs: paths, Verbs: []string{"get"}}}}
		_, err = admin.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{})
		Must(t, "create cluster role for "+name, err)
		binding := &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "endpoints-" + name},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: name, Namespace: EndpointTokenNamespace}},
		}
		_, err = admin.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{})
		Must(t, "bind cluster role for "+name, err)
		Must(t, "rules in force for "+name, framework.WaitGranted(ctx, admin, "system:serviceaccount:"+EndpointTokenNamespace+":"+name, "", role.Rules))
	}
	tr, err := admin.CoreV1().ServiceAccounts(EndpointTokenNamespace).CreateToken(ctx, name,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}, metav1.CreateOptions{})
	Must(t, "request token for "+name, err)
	return tr.Status.Token
}

// endpointClient speaks to the components' metrics ports, whose
// certificates are self-signed in the tests.
var endpointClient = &http.Client{
	Timeout:   70 * time.Second,                                                        // a profile of up to 30 s, and the port's write timeout
	Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}, //nolint:gosec // self-signed test ports
}

// EndpointGet GETs path on a metrics port (addr "host:port") over HTTPS,
// with "Authorization: Bearer token" unless token is empty, and returns
// the status code and body.
func EndpointGet(ctx context.Context, addr, path, token string) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+addr+path, nil)
	if err != nil {
		return 0, nil, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := endpointClient.Do(req)
	if err != nil {
		return 0, nil, fmt.Errorf("GET %s: %w", path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, nil, fmt.Errorf("read %s: %w", path, err)
	}
	return resp.StatusCode, body, nil
}
