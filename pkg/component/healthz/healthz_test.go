package healthz

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"k8s.io/klog/v2/ktesting"
	"k8s.io/klog/v2/textlogger"
)

func TestEndpoints(t *testing.T) {
	logger, _ := ktesting.NewTestContext(t)
	var synced atomic.Bool
	informers := NamedCheck("informer-sync", func(*http.Request) error {
		if !synced.Load() {
			return errors.New("podgroups.v1beta1.scheduling.k8s.io not synced\nsecond line")
		}
		return nil
	})
	h, err := New(logger, []Checker{Ping}, []Checker{Ping, informers})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	h.Install(mux)
	get := func(path string) (int, string) {
		t.Helper()
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		body, _ := io.ReadAll(rec.Result().Body)
		return rec.Code, string(body)
	}
	for _, tc := range []struct {
		path     string
		synced   bool
		wantCode int
		wantBody string
	}{
		{path: "/livez", wantCode: 200, wantBody: "ok"},
		{path: "/healthz", wantCode: 200, wantBody: "ok"},
		{path: "/livez?verbose", wantCode: 200, wantBody: "[+]ping ok\nlivez check passed\n"},
		{path: "/readyz", wantCode: 500, wantBody: "[+]ping ok\n[-]informer-sync failed: podgroups.v1beta1.scheduling.k8s.io not synced; second line\nreadyz check failed\n"},
		{path: "/readyz/informer-sync", wantCode: 500, wantBody: "[-]informer-sync failed: podgroups.v1beta1.scheduling.k8s.io not synced; second line\nreadyz check failed\n"},
		{path: "/readyz/ping", wantCode: 200, wantBody: "ok"},
		{path: "/readyz?exclude=informer-sync&verbose", wantCode: 200, wantBody: "[+]ping ok\n[+]informer-sync excluded: ok\nreadyz check passed\n"},
		{path: "/readyz?verbose", synced: true, wantCode: 200, wantBody: "[+]ping ok\n[+]informer-sync ok\nreadyz check passed\n"},
		{path: "/livez/informer-sync", wantCode: 404, wantBody: "404 page not found\n"},
	} {
		synced.Store(tc.synced)
		code, body := get(tc.path)
		if code != tc.wantCode || body != tc.wantBody {
			t.Errorf("GET %s: %d %q, want %d %q", tc.path, code, body, tc.wantCode, tc.wantBody)
		}
	}
}

func TestNewRefusesBadNames(t *testing.T) {
	logger, _ := ktesting.NewTestContext(t)
	ok := func(*http.Request) error { return nil }
	for _, checks := range [][]Checker{
		{Ping, Ping},
		{NamedCheck("", ok)},
		{NamedCheck("a/b", ok)},
	} {
		if _, err := New(logger, checks, nil); err == nil {
			t.Errorf("New(%v) accepted", checks)
		}
	}
}

// TestLogsChangesOnly: a check failing at every probe is logged once,
// then once when it passes again.
func TestLogsChangesOnly(t *testing.T) {
	var buf bytes.Buffer
	logger := textlogger.NewLogger(textlogger.NewConfig(textlogger.Output(&buf)))
	var fail atomic.Bool
	h, err := New(logger, nil, []Checker{NamedCheck("sockets", func(*http.Request) error {
		if fail.Load() {
			return errors.New("dra.sock: connection refused")
		}
		return nil
	})})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	h.Install(mux)
	for i := range 5 {
		fail.Store(i < 3)
		mux.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/readyz", nil))
	}
	logged := buf.String()
	if strings.Count(logged, "Health check failing") != 1 || strings.Count(logged, "Health check passes again") != 1 {
		t.Errorf("log:\n%s", logged)
	}
}
