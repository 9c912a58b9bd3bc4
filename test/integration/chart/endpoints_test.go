package chart

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gpufabric/gpufabric/test/integration/framework"
	"github.com/gpufabric/gpufabric/test/integration/itest"
)

// TestMetricsPortsAuthorized runs gpufabric-scheduler and the kubelet
// plugin as processes with their shipped RBAC rules and checks their
// metrics ports against the real apiserver, as kube-scheduler's secure
// port behaves: HTTPS only; the health endpoints answer anyone; /metrics
// refuses a request without a token (401) and a token whose user RBAC does
// not let get /metrics (403), and serves one that may (200); /debug/pprof/
// is 404 without --profiling even to a user who may read it, and with it
// is served to that user only, its ?seconds= capped.
func TestMetricsPortsAuthorized(t *testing.T) {
	const nodeName = "gb200-r1-n01"
	cp, admin, pluginKubeconfig := itest.PluginEnv(t, nodeName)
	schedAddr, pluginAddr := freeAddr(t), freeAddr(t)
	const user = "endpoints-scheduler"
	itest.Must(t, "grant scheduler rules", framework.GrantSchedulerRules(t.Context(), admin, user, itest.RecordNamespace))
	kc, err := cp.WriteUserKubeconfig(user)
	itest.Must(t, "kubeconfig", err)
	itest.Must(t, "start scheduler", cp.StartProcess("endpoints-scheduler", framework.SchedulerBinary(t), "--kubeconfig="+kc,
		"--leader-elect=false", "--commit-record-namespace="+itest.RecordNamespace, "--metrics-address="+schedAddr))
	plugin := framework.NewPlugin(t, pluginKubeconfig, itest.GB200Fabric, nodeName)
	plugin.ExtraArgs = []string{"--metrics-address=" + pluginAddr, "--profiling=true"}
	plugin.Start()

	reader := itest.EndpointToken(t, admin, "prometheus", "/metrics")
	nobody := itest.EndpointToken(t, admin, "nobody")
	profiler := itest.EndpointToken(t, admin, "profiler", "/debug/pprof/*")
	for _, addr := range []string{schedAddr, pluginAddr} {
		itest.Poll(t, "metrics port of "+addr+" up", 60*time.Second, func(ctx context.Context) error {
			return checkHealth(ctx, addr, "/livez", 200, "ok")
		})
	}
	for _, c := range []struct {
		name, addr string
		pprof      int // what the profiler gets on /debug/pprof/
	}{{"scheduler", schedAddr, http.StatusNotFound}, {"plugin", pluginAddr, http.StatusOK}} {
		for _, tc := range []struct {
			what, path, token string
			want              int
			body              string
		}{
			{what: "health without a token", path: "/readyz/ping", want: 200},
			{what: "anonymous scrape", path: "/metrics", want: http.StatusUnauthorized},
			{what: "a token that is no token", path: "/metrics", token: "made-up", want: http.StatusUnauthorized},
			{what: "a token without the right", path: "/metrics", token: nobody, want: http.StatusForbidden, body: `cannot get path "/metrics"`},
			{what: "a token with the right", path: "/metrics", token: reader, want: http.StatusOK, body: "gpufabric_"},
			{what: "the metrics right is no profile right", path: "/debug/pprof/", token: reader, want: http.StatusForbidden},
			{what: "anonymous profile", path: "/debug/pprof/", want: http.StatusUnauthorized},
			{what: "profiles", path: "/debug/pprof/", token: profiler, want: c.pprof},
			{what: "a profile past the cap", path: "/debug/pprof/profile?seconds=31", token: profiler, want: map[int]int{404: 404, 200: 400}[c.pprof]},
		} {
			code, body, err := itest.EndpointGet(t.Context(), c.addr, tc.path, tc.token)
			itest.Must(t, c.name+" "+tc.what, err)
			if code != tc.want || !strings.Contains(string(body), tc.body) {
				t.Errorf("%s, %s: GET %s: %d %.200q, want %d with %q", c.name, tc.what, tc.path, code, body, tc.want, tc.body)
			}
		}
		// Plain HTTP is no way around it.
		if resp, err := http.Get(fmt.Sprintf("http://%s/metrics", c.addr)); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				t.Errorf("%s serves /metrics over plain HTTP", c.name)
			}
		}
	}
}
