package secureserving

import (
	"fmt"
	"net/http"
	"net/http/pprof"
	"strconv"
	"strings"
)

// MaxProfileSeconds bounds a profile's or a trace's ?seconds= (pprof's
// CPU profile defaults to 30).
const MaxProfileSeconds = 30

// InstallProfiling registers Go's profiles under /debug/pprof/ on mux
// (the paths kube-scheduler's --profiling serves), bounded: a ?seconds=
// above MaxProfileSeconds, or not a number, is refused with 400, and a
// request that samples over time (the CPU profile, the trace, a delta
// profile with ?seconds=) is refused with 429 while another runs.
func InstallProfiling(mux *http.ServeMux) {
	slot := make(chan struct{}, 1)
	for path, h := range map[string]http.HandlerFunc{
		"/debug/pprof/":        pprof.Index,
		"/debug/pprof/cmdline": pprof.Cmdline,
		"/debug/pprof/profile": pprof.Profile,
		"/debug/pprof/symbol":  pprof.Symbol,
		"/debug/pprof/trace":   pprof.Trace,
	} {
		mux.Handle(path, bounded(slot, h))
	}
}

func bounded(slot chan struct{}, h http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		secs := r.URL.Query().Get("seconds")
		if secs != "" {
			v, err := strconv.ParseFloat(secs, 64)
			if err != nil || v < 0 || v > MaxProfileSeconds {
				http.Error(w, fmt.Sprintf("seconds must be a number from 0 to %d, got %q", MaxProfileSeconds, secs), http.StatusBadRequest)
				return
			}
		}
		if secs != "" || strings.HasSuffix(r.URL.Path, "/profile") || strings.HasSuffix(r.URL.Path, "/trace") {
			select {
			case slot <- struct{}{}:
				defer func() { <-slot }()
			default:
				w.Header().Set("Retry-After", "1")
				http.Error(w, "another profile or trace is running", http.StatusTooManyRequests)
				return
			}
		}
		h(w, r)
	})
}
