package secureserving

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// TestProfilingBounded: profiles are served, a ?seconds= past the cap or
// not a number is refused, and a second sampling profile waits its turn.
func TestProfilingBounded(t *testing.T) {
	mux := http.NewServeMux()
	InstallProfiling(mux)
	get := func(path string) int {
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, httptest.NewRequest(http.MethodGet, path, nil))
		return w.Code
	}
	for path, want := range map[string]int{
		"/debug/pprof/":                   200,
		"/debug/pprof/heap":               200,
		"/debug/pprof/goroutine?debug=1":  200,
		"/debug/pprof/cmdline":            200,
		"/debug/pprof/trace?seconds=0.05": 200,
		"/debug/pprof/profile?seconds=31": 400,
		"/debug/pprof/trace?seconds=600":  400,
		"/debug/pprof/heap?seconds=3600":  400,
		"/debug/pprof/profile?seconds=-1": 400,
		"/debug/pprof/profile?seconds=x":  400,
	} {
		if got := get(path); got != want {
			t.Errorf("GET %s: %d, want %d", path, got, want)
		}
	}
	// One sampling request at a time: hold the slot as a running
	// profile would.
	slot := make(chan struct{}, 1)
	slot <- struct{}{}
	h := bounded(slot, func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(200) })
	for path, want := range map[string]int{
		"/debug/pprof/profile?seconds=1": 429,
		"/debug/pprof/trace":             429,
		"/debug/pprof/heap?seconds=1":    429,
		"/debug/pprof/heap":              200,
	} {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, path, nil))
		if w.Code != want {
			t.Errorf("GET %s while another profile runs: %d, want %d", path, w.Code, want)
		}
	}
}
