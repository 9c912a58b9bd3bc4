package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"github.com/gpufabric/gpufabric/pkg/component/delegatedauth"
	"github.com/gpufabric/gpufabric/pkg/component/healthz"
	"github.com/gpufabric/gpufabric/pkg/component/secureserving"
)

// servingOptions are the settings of the HTTPS port of --metrics-address
// (docs/operations.md, "Metrics and profiles"): the port is on the host
// network with managed IMEX channels, so it is served as kube-scheduler's
// secure port is.
type servingOptions struct {
	certFile, keyFile string
	alwaysAllowPaths  string
	profiling         string
	profilingOn       bool
}

func (s *servingOptions) bind(fs *flagSet) {
	str := func(p *string, name, env, def, help string) {
		fs.StringVar(p, name, envOr(env, def), fmt.Sprintf("%s (env %s)", help, env))
	}
	str(&s.certFile, "tls-cert-file", "GPUFABRIC_TLS_CERT_FILE", "", "PEM certificate (chain) the metrics port serves, re-read when it changes; empty (with --tls-private-key-file): a self-signed certificate made at start")
	str(&s.keyFile, "tls-private-key-file", "GPUFABRIC_TLS_PRIVATE_KEY_FILE", "", "PEM private key of --tls-cert-file")
	str(&s.alwaysAllowPaths, "authorization-always-allow-paths", "GPUFABRIC_AUTHORIZATION_ALWAYS_ALLOW_PATHS", strings.Join(delegatedauth.DefaultAlwaysAllowPaths, ","),
		"comma-separated paths of the metrics port served without a token (a trailing * matches a prefix); every other path needs a bearer token whose user RBAC allows the non-resource URL")
	str(&s.profiling, "profiling", "GPUFABRIC_PROFILING", "false", "serve Go's profiles under /debug/pprof/ on --metrics-address to users RBAC allows the non-resource URL /debug/pprof/*")
}

func (s *servingOptions) validate(metricsAddress string) error {
	on, err := false, error(nil)
	if s.profiling != "" { // an empty environment twin is off
		on, err = strconv.ParseBool(s.profiling)
	}
	switch {
	case err != nil:
		return fmt.Errorf("%w: --profiling must be true or false, got %q", errUsage, s.profiling)
	case (s.certFile == "") != (s.keyFile == ""):
		return fmt.Errorf("%w: --tls-cert-file and --tls-private-key-file go together, got %q and %q", errUsage, s.certFile, s.keyFile)
	case on && metricsAddress == "":
		return fmt.Errorf("%w: --profiling needs --metrics-address: the profiles are served beside /metrics", errUsage)
	}
	s.profilingOn = on
	return nil
}

func (s *servingOptions) paths() []string { return delegatedauth.ParsePaths(s.alwaysAllowPaths) }

// serveHTTP serves /metrics, the health endpoints (/livez, /readyz,
// /healthz) and, with --profiling, /debug/pprof/ over HTTPS on addr
// until ctx is done, every path but the always-allowed ones behind
// delegated authentication and authorization through the apiserver.
func serveHTTP(ctx context.Context, addr string, s *servingOptions, restCfg *rest.Config, reg *prometheus.Registry, health *healthz.Handler) (net.Addr, error) {
	auth, err := delegatedauth.NewForConfig(restCfg, delegatedauth.Config{AlwaysAllowPaths: s.paths(), Logger: klog.FromContext(ctx).WithName("endpoints")})
	if err != nil {
		return nil, fmt.Errorf("metrics port authorization: %w", err)
	}
	return serveWith(ctx, addr, s, auth, reg, health)
}

// serveWith is serveHTTP with its filter given.
func serveWith(ctx context.Context, addr string, s *servingOptions, auth *delegatedauth.Auth, reg *prometheus.Registry, health *healthz.Handler) (net.Addr, error) {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	health.Install(mux)
	if s.profilingOn {
		secureserving.InstallProfiling(mux)
	}
	return secureserving.Serve(ctx, secureserving.Config{
		Address: addr, CertFile: s.certFile, KeyFile: s.keyFile, Name: "gpufabric-kubelet-plugin", Handler: auth.Wrap(mux),
	})
}
