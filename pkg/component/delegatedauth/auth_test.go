package delegatedauth

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// apiserver fakes the two review APIs: tokens maps a token to its user
// (absent: not authenticated); allowed lists "user verb path" answers.
type apiserver struct {
	mu          sync.Mutex
	tokens      map[string]string
	allowed     map[string]bool
	tokenErr    error
	sarErr      error
	tokenCalls  atomic.Int32
	sarCalls    atomic.Int32
	lastSAR     *authorizationv1.SubjectAccessReview
	blockTokens chan struct{} // non-nil: token reviews wait for it
}

func (s *apiserver) auth(t *testing.T, cfg Config) *Auth {
	t.Helper()
	c := fake.NewClientset()
	c.PrependReactor("create", "tokenreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		s.tokenCalls.Add(1)
		if s.blockTokens != nil {
			<-s.blockTokens
		}
		tr := a.(k8stesting.CreateAction).GetObject().(*authenticationv1.TokenReview)
		if s.tokenErr != nil {
			return true, nil, s.tokenErr
		}
		s.mu.Lock()
		name, ok := s.tokens[tr.Spec.Token]
		s.mu.Unlock()
		out := tr.DeepCopy()
		out.Status.Authenticated = ok
		if ok {
			out.Status.User = authenticationv1.UserInfo{Username: name, UID: "uid-" + name, Groups: []string{"system:authenticated"}}
		}
		return true, out, nil
	})
	c.PrependReactor("create", "subjectaccessreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		s.sarCalls.Add(1)
		sar := a.(k8stesting.CreateAction).GetObject().(*authorizationv1.SubjectAccessReview)
		if s.sarErr != nil {
			return true, nil, s.sarErr
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		s.lastSAR = sar
		out := sar.DeepCopy()
		out.Status.Allowed = s.allowed[sar.Spec.User+" "+sar.Spec.NonResourceAttributes.Verb+" "+sar.Spec.NonResourceAttributes.Path]
		return true, out, nil
	})
	cfg.TokenReviews, cfg.SubjectAccessReviews = c.AuthenticationV1().TokenReviews(), c.AuthorizationV1().SubjectAccessReviews()
	a, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

var ok = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("served")) })

func get(h http.Handler, path, authorization string) (int, string) {
	r := httptest.NewRequest(http.MethodGet, path, nil)
	if authorization != "" {
		r.Header.Set("Authorization", authorization)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w.Code, w.Body.String()
}

func TestFilter(t *testing.T) {
	s := &apiserver{
		tokens:  map[string]string{"prom-token": "system:serviceaccount:monitoring:prometheus", "nobody-token": "nobody"},
		allowed: map[string]bool{"system:serviceaccount:monitoring:prometheus get /metrics": true},
	}
	h := s.auth(t, Config{}).Wrap(ok)
	for _, tc := range []struct {
		name, path, authorization string
		wantCode                  int
		wantBody                  string
	}{
		{name: "health without a token", path: "/livez", wantCode: 200, wantBody: "served"},
		{name: "a health check without a token", path: "/readyz/informer-sync", wantCode: 200, wantBody: "served"},
		{name: "healthz", path: "/healthz", wantCode: 200, wantBody: "served"},
		{name: "anonymous scrape", path: "/metrics", wantCode: 401, wantBody: "Unauthorized"},
		{name: "basic auth", path: "/metrics", authorization: "Basic cHJvbTpwcm9t", wantCode: 401},
		{name: "empty bearer", path: "/metrics", authorization: "Bearer  ", wantCode: 401},
		{name: "unknown token", path: "/metrics", authorization: "Bearer made-up", wantCode: 401},
		{name: "token without the right", path: "/metrics", authorization: "Bearer nobody-token", wantCode: 403, wantBody: `forbidden: User "nobody" cannot get path "/metrics"`},
		{name: "token with the right", path: "/metrics", authorization: "Bearer prom-token", wantCode: 200, wantBody: "served"},
		{name: "lower-case scheme", path: "/metrics", authorization: "bearer prom-token", wantCode: 200},
		{name: "the right is per path", path: "/debug/pprof/", authorization: "Bearer prom-token", wantCode: 403},
		{name: "a path like a health path", path: "/livezz", wantCode: 401},
	} {
		code, body := get(h, tc.path, tc.authorization)
		if code != tc.wantCode || !strings.Contains(body, tc.wantBody) {
			t.Errorf("%s: GET %s: %d %q, want %d %q", tc.name, tc.path, code, body, tc.wantCode, tc.wantBody)
		}
	}
	sar := s.lastSAR.Spec
	if sar.User != "system:serviceaccount:monitoring:prometheus" || sar.UID != "uid-system:serviceaccount:monitoring:prometheus" ||
		len(sar.Groups) != 1 || sar.NonResourceAttributes.Path != "/debug/pprof/" || sar.NonResourceAttributes.Verb != "get" || sar.ResourceAttributes != nil {
		t.Errorf("last access review %+v", sar)
	}
}

// TestCached: within the TTL a known caller costs no review, either
// answer; past it, the apiserver is asked again.
func TestCached(t *testing.T) {
	s := &apiserver{tokens: map[string]string{"prom": "prom", "nobody": "nobody"}, allowed: map[string]bool{"prom get /metrics": true}}
	now := time.Unix(1000, 0)
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	h := s.auth(t, Config{Now: clock}).Wrap(ok)
	for range 5 {
		if code, _ := get(h, "/metrics", "Bearer prom"); code != 200 {
			t.Fatalf("code %d", code)
		}
		if code, _ := get(h, "/metrics", "Bearer nobody"); code != 403 {
			t.Fatalf("code %d", code)
		}
		if code, _ := get(h, "/metrics", "Bearer made-up"); code != 401 {
			t.Fatalf("code %d", code)
		}
	}
	if tc, sc := s.tokenCalls.Load(), s.sarCalls.Load(); tc != 3 || sc != 2 {
		t.Errorf("%d token reviews and %d access reviews for 3 callers × 5 requests, want 3 and 2", tc, sc)
	}
	mu.Lock()
	now = now.Add(DefaultCacheTTL)
	mu.Unlock()
	get(h, "/metrics", "Bearer prom")
	if tc, sc := s.tokenCalls.Load(), s.sarCalls.Load(); tc != 4 || sc != 3 {
		t.Errorf("after the TTL: %d token reviews and %d access reviews, want 4 and 3", tc, sc)
	}
}

// TestBounded: the caches hold at most CacheSize entries, and a request
// that would start one review more than MaxInFlight is answered 429 at
// once, while callers already cached are still served.
func TestBounded(t *testing.T) {
	s := &apiserver{tokens: map[string]string{"prom": "prom"}, allowed: map[string]bool{"prom get /metrics": true}}
	a := s.auth(t, Config{CacheSize: 2, MaxInFlight: 1})
	h := a.Wrap(ok)
	get(h, "/metrics", "Bearer prom")
	for _, tok := range []string{"a", "b", "c"} {
		get(h, "/metrics", "Bearer "+tok)
	}
	if n := a.users.Len(); n != 2 {
		t.Errorf("token cache holds %d entries, want CacheSize 2", n)
	}
	get(h, "/metrics", "Bearer prom") // evicted: reviewed again, cached again

	s.blockTokens = make(chan struct{})
	done := make(chan int)
	go func() {
		code, _ := get(h, "/metrics", "Bearer slow")
		done <- code
	}()
	for s.tokenCalls.Load() < 6 {
		time.Sleep(time.Millisecond)
	}
	if code, body := get(h, "/metrics", "Bearer other"); code != http.StatusTooManyRequests {
		t.Errorf("a review beyond MaxInFlight: %d %q, want 429", code, body)
	}
	if code, _ := get(h, "/metrics", "Bearer prom"); code != 200 {
		t.Errorf("a cached caller during a flood: %d, want 200", code)
	}
	close(s.blockTokens)
	if code := <-done; code != 401 {
		t.Errorf("the slow review: %d, want 401", code)
	}
}

// TestReviewErrors: a failed token review refuses with 401, a failed
// access review with 500; neither is cached.
func TestReviewErrors(t *testing.T) {
	s := &apiserver{tokens: map[string]string{"prom": "prom"}, allowed: map[string]bool{"prom get /metrics": true}, tokenErr: errors.New("apiserver down")}
	h := s.auth(t, Config{}).Wrap(ok)
	if code, _ := get(h, "/metrics", "Bearer prom"); code != 401 {
		t.Errorf("token review failed: %d, want 401", code)
	}
	s.tokenErr, s.sarErr = nil, errors.New("apiserver down")
	if code, _ := get(h, "/metrics", "Bearer prom"); code != 500 {
		t.Errorf("access review failed: %d, want 500", code)
	}
	s.sarErr = nil
	if code, _ := get(h, "/metrics", "Bearer prom"); code != 200 {
		t.Errorf("after the apiserver is back: %d, want 200", code)
	}
}

func TestNewRefusesBadPaths(t *testing.T) {
	s := &apiserver{}
	c := fake.NewClientset()
	for _, paths := range [][]string{{"metrics"}, {"/a*b"}, {"/*/x"}} {
		if _, err := New(Config{TokenReviews: c.AuthenticationV1().TokenReviews(), SubjectAccessReviews: c.AuthorizationV1().SubjectAccessReviews(), AlwaysAllowPaths: paths}); err == nil {
			t.Errorf("always-allow paths %q accepted", paths)
		}
	}
	if _, err := New(Config{}); err == nil {
		t.Error("a Config without review APIs accepted")
	}
	a := s.auth(t, Config{AlwaysAllowPaths: []string{}})
	if a.AlwaysAllowed("/livez") {
		t.Error("an empty AlwaysAllowPaths still allows /livez")
	}
}
