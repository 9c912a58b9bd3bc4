package healthz

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"

	"k8s.io/klog/v2"
)

// Checker is one named check; client-go's leaderelection.HealthzAdaptor
// is one.
type Checker interface {
	Name() string
	Check(*http.Request) error
}

// NamedCheck returns a Checker from a name and a function.
func NamedCheck(name string, check func(*http.Request) error) Checker {
	return namedCheck{name: name, check: check}
}

type namedCheck struct {
	name  string
	check func(*http.Request) error
}

func (c namedCheck) Name() string                { return c.name }
func (c namedCheck) Check(r *http.Request) error { return c.check(r) }

// Ping always passes: the HTTP server answers.
var Ping = NamedCheck("ping", func(*http.Request) error { return nil })

// Handler serves the health endpoints. Create with New.
type Handler struct {
	live, ready []Checker
	logger      klog.Logger

	mu sync.Mutex
	// last is each check's last outcome ("" passed), to log changes only.
	last map[string]string
}

// New returns a Handler for the live checks and the ready checks (a
// component's readiness usually includes its liveness checks: pass both).
// Check names must be unique per endpoint. logger receives a line when a
// check starts or stops failing.
func New(logger klog.Logger, live, ready []Checker) (*Handler, error) {
	for _, set := range [][]Checker{live, ready} {
		seen := map[string]bool{}
		for _, c := range set {
			if n := c.Name(); n == "" || strings.ContainsAny(n, "/?&=") || seen[n] {
				return nil, fmt.Errorf("health check name %q is empty, repeated or not a path segment", n)
			}
			seen[c.Name()] = true
		}
	}
	return &Handler{live: live, ready: ready, logger: logger, last: map[string]string{}}, nil
}

// Install registers /livez, /readyz, /healthz and their per-check paths
// on mux.
func (h *Handler) Install(mux *http.ServeMux) {
	for _, ep := range []struct {
		path   string
		checks []Checker
	}{{"livez", h.live}, {"readyz", h.ready}, {"healthz", h.live}} {
		mux.Handle("/"+ep.path, h.endpoint(ep.path, ep.checks))
		for _, c := range ep.checks {
			mux.Handle("/"+ep.path+"/"+c.Name(), h.endpoint(ep.path, []Checker{c}))
		}
	}
}

// endpoint runs checks (minus ?exclude=) and writes the Kubernetes-style
// answer.
func (h *Handler) endpoint(name string, checks []Checker) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		excluded := r.URL.Query()["exclude"]
		_, verbose := r.URL.Query()["verbose"]
		var b strings.Builder
		failed := false
		for _, c := range checks {
			if slices.Contains(excluded, c.Name()) {
				fmt.Fprintf(&b, "[+]%s excluded: ok\n", c.Name())
				continue
			}
			err := c.Check(r)
			h.note(name, c.Name(), err)
			if err != nil {
				failed = true
				fmt.Fprintf(&b, "[-]%s failed: %s\n", c.Name(), oneLine(err.Error()))
				continue
			}
			fmt.Fprintf(&b, "[+]%s ok\n", c.Name())
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("Cache-Control", "no-store")
		if failed {
			w.WriteHeader(http.StatusInternalServerError)
			fmt.Fprintf(w, "%s%s check failed\n", b.String(), name)
			return
		}
		if !verbose {
			_, _ = w.Write([]byte("ok"))
			return
		}
		fmt.Fprintf(w, "%s%s check passed\n", b.String(), name)
	})
}

// note logs a check that starts failing, fails differently, or recovers.
func (h *Handler) note(endpoint, check string, err error) {
	msg := ""
	if err != nil {
		msg = err.Error()
	}
	key := endpoint + "/" + check
	h.mu.Lock()
	prev, seen := h.last[key]
	h.last[key] = msg
	h.mu.Unlock()
	switch {
	case msg == prev && seen, msg == "" && !seen:
	case msg == "":
		h.logger.Info("Health check passes again", "endpoint", endpoint, "check", check)
	default:
		h.logger.Info("Health check failing", "endpoint", endpoint, "check", check, "reason", msg)
	}
}

// oneLine keeps a reason on its line of the answer.
func oneLine(s string) string {
	return strings.ReplaceAll(strings.TrimSpace(s), "\n", "; ")
}
