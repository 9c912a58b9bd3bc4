package main

import (
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2/ktesting"

	"github.com/gpufabric/gpufabric/pkg/component/delegatedauth"
	"github.com/gpufabric/gpufabric/pkg/component/healthz"
)

// TestServing: the plugin's metrics port is HTTPS; its health endpoints
// answer anyone, /metrics only an authorized token, and /debug/pprof/ is
// 404 unless --profiling (env GPUFABRIC_PROFILING) is on.
func TestServing(t *testing.T) {
	for _, profiling := range []string{"", "true"} {
		t.Run("profiling="+profiling, func(t *testing.T) {
			t.Setenv("GPUFABRIC_PROFILING", profiling)
			fs := newFlagSet("run", io.Discard)
			var s servingOptions
			s.bind(fs)
			if err := fs.Parse(nil); err != nil {
				t.Fatal(err)
			}
			if err := s.validate("127.0.0.1:0"); err != nil {
				t.Fatal(err)
			}
			logger, ctx := ktesting.NewTestContext(t)
			health, err := healthz.New(logger, []healthz.Checker{healthz.Ping}, []healthz.Checker{healthz.Ping})
			if err != nil {
				t.Fatal(err)
			}
			addr, err := serveWith(ctx, "127.0.0.1:0", &s, fakeAuth(t, s.paths()), prometheus.NewRegistry(), health)
			if err != nil {
				t.Fatal(err)
			}
			wantPprof := map[string]int{"": 404, "true": 200}[profiling]
			for _, tc := range []struct {
				path, token string
				want        int
			}{
				{"/livez", "", 200}, {"/readyz/ping", "", 200}, {"/healthz", "", 200},
				{"/metrics", "", 401}, {"/metrics", "nobody", 403}, {"/metrics", "reader", 200},
				{"/debug/pprof/", "", 401}, {"/debug/pprof/heap", "reader", wantPprof},
			} {
				if got := get(t, fmt.Sprintf("https://%s%s", addr, tc.path), tc.token); got != tc.want {
					t.Errorf("GET %s (token %q): %d, want %d", tc.path, tc.token, got, tc.want)
				}
			}
		})
	}
}

func get(t *testing.T, url, token string) int {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // a self-signed port
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}

// fakeAuth is the port's filter on a fake apiserver: token "reader" may
// get /metrics and /debug/pprof/*, token "nobody" nothing.
func fakeAuth(t *testing.T, paths []string) *delegatedauth.Auth {
	t.Helper()
	c := fake.NewClientset()
	c.PrependReactor("create", "tokenreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		tr := a.(k8stesting.CreateAction).GetObject().(*authenticationv1.TokenReview).DeepCopy()
		tr.Status.Authenticated = tr.Spec.Token == "reader" || tr.Spec.Token == "nobody"
		tr.Status.User.Username = tr.Spec.Token
		return true, tr, nil
	})
	c.PrependReactor("create", "subjectaccessreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		sar := a.(k8stesting.CreateAction).GetObject().(*authorizationv1.SubjectAccessReview).DeepCopy()
		p := sar.Spec.NonResourceAttributes.Path
		sar.Status.Allowed = sar.Spec.User == "reader" && (p == "/metrics" || strings.HasPrefix(p, "/debug/pprof/"))
		return true, sar, nil
	})
	auth, err := delegatedauth.New(delegatedauth.Config{TokenReviews: c.AuthenticationV1().TokenReviews(), SubjectAccessReviews: c.AuthorizationV1().SubjectAccessReviews(), AlwaysAllowPaths: paths})
	if err != nil {
		t.Fatal(err)
	}
	return auth
}
