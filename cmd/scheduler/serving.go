package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"net/http"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/klog/v2"

	"github.com/gpufabric/gpufabric/pkg/component/delegatedauth"
	"github.com/gpufabric/gpufabric/pkg/component/secureserving"
	"github.com/gpufabric/gpufabric/pkg/topology"
)

// servingOptions are the settings of the HTTPS port of --metrics-address
// (docs/operations.md, "Metrics and profiles").
type servingOptions struct {
	certFile, keyFile string
	alwaysAllowPaths  string
}

func (s *servingOptions) bind(fs *flag.FlagSet) {
	fs.StringVar(&s.certFile, "tls-cert-file", "", "PEM certificate (chain) the metrics port serves, re-read when it changes; empty (with --tls-private-key-file): a self-signed certificate made at start")
	fs.StringVar(&s.keyFile, "tls-private-key-file", "", "PEM private key of --tls-cert-file")
	fs.StringVar(&s.alwaysAllowPaths, "authorization-always-allow-paths", strings.Join(delegatedauth.DefaultAlwaysAllowPaths, ","),
		"comma-separated paths of the metrics port served without a token (a trailing * matches a prefix); every other path needs a bearer token whose user RBAC allows the non-resource URL")
}

func (s *servingOptions) validate() error {
	if (s.certFile == "") != (s.keyFile == "") {
		return fmt.Errorf("--tls-cert-file and --tls-private-key-file go together, got %q and %q", s.certFile, s.keyFile)
	}
	return nil
}

func (s *servingOptions) paths() []string { return delegatedauth.ParsePaths(s.alwaysAllowPaths) }

// serveHTTP serves /metrics, whatever mounts add (the health endpoints)
// and, with --profiling, /debug/pprof/, over HTTPS on --metrics-address
// until ctx is done, every path but the always-allowed ones behind
// delegated authentication and authorization (TokenReview and
// SubjectAccessReview through the apiserver, as kube-scheduler's secure
// port). It returns the address it listens on (nil when
// --metrics-address is empty).
func (o *options) serveHTTP(ctx context.Context, reg *prometheus.Registry, mounts ...func(*http.ServeMux)) (net.Addr, error) {
	if o.metricsAddress == "" {
		return nil, nil
	}
	restCfg, err := o.restConfig()
	if err != nil {
		return nil, fmt.Errorf("load kubeconfig: %w", err)
	}
	restCfg.UserAgent = topology.SchedulerName
	auth, err := delegatedauth.NewForConfig(restCfg, delegatedauth.Config{AlwaysAllowPaths: o.serving.paths(), Logger: klog.FromContext(ctx).WithName("endpoints")})
	if err != nil {
		return nil, fmt.Errorf("metrics port authorization: %w", err)
	}
	return o.serve(ctx, reg, auth, mounts...)
}

// serve is serveHTTP with its filter given.
func (o *options) serve(ctx context.Context, reg *prometheus.Registry, auth *delegatedauth.Auth, mounts ...func(*http.ServeMux)) (net.Addr, error) {
	return secureserving.Serve(ctx, secureserving.Config{
		Address: o.metricsAddress, CertFile: o.serving.certFile, KeyFile: o.serving.keyFile, Name: topology.SchedulerName,
		Handler: auth.Wrap(o.httpHandler(reg, mounts...)),
	})
}

// httpHandler routes /metrics to reg, the mounts' paths to them and, only
// with --profiling, the Go runtime's profiles under /debug/pprof/ (the
// paths kube-scheduler serves, bounded by secureserving); without it those
// paths are 404.
func (o *options) httpHandler(reg *prometheus.Registry, mounts ...func(*http.ServeMux)) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	for _, m := range mounts {
		m(mux)
	}
	if o.profiling {
		secureserving.InstallProfiling(mux)
	}
	return mux
}
