package main

import (
	"crypto/tls"
	"flag"
	"fmt"
	"github.com/gpufabric/gpufabric/pkg/gang/scheduler"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/gpufabric/gpufabric/pkg/component/delegatedauth"
	"github.com/gpufabric/gpufabric/pkg/gang/placement/spares"
)

// TestEnvTwins: an environment twin fills a flag not given on the command
// line; a given flag wins.
func TestEnvTwins(t *testing.T) {
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	o := bindFlags(fs)
	if err := fs.Parse([]string{"--domain-channels=3"}); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{
		"GPUFABRIC_DOMAIN_CHANNELS":             "9",
		"GPUFABRIC_TOPOLOGY_LEVELS":             "rack, leaf ,,spine",
		"GPUFABRIC_LEADER_ELECT":                "false",
		"GPUFABRIC_COMMIT_PARALLELISM":          "32",
		"GPUFABRIC_COMMITS_IN_FLIGHT":           "3",
		"GPUFABRIC_KUBE_API_QPS":                "50.5",
		"GPUFABRIC_LEADER_ELECT_LEASE_DURATION": "4s",
		"GPUFABRIC_COMMIT_RECORD_NAMESPACE":     "gpufabric-system",
		"KUBECONFIG":                            "/tmp/kc",
		"GPUFABRIC_STARVATION_BOUND":            "10m",
		"GPUFABRIC_DISABLE_PREEMPTION":          "true",
		"GPUFABRIC_NOMINATION_TIMEOUT":          "90s",
		"GPUFABRIC_PACK_ORDER":                  "fullest-nodes",
		"GPUFABRIC_PROFILING":                   "true",
		"GPUFABRIC_PER_DOMAIN_METRICS":          "true",

		"GPUFABRIC_STARVATION_RESERVATIONS_PER_NAMESPACE": "2",

		"GPUFABRIC_TLS_CERT_FILE":                    "/tls/tls.crt",
		"GPUFABRIC_TLS_PRIVATE_KEY_FILE":             "/tls/tls.key",
		"GPUFABRIC_AUTHORIZATION_ALWAYS_ALLOW_PATHS": "/livez, /metrics",

		"GPUFABRIC_PLACEMENT_ALLOCATE_CALLS": "500",
		"GPUFABRIC_PLACEMENT_TIME_BUDGET":    "250ms",
		"GPUFABRIC_FREE_ROOM_INTERVAL":       "30s",
		"GPUFABRIC_NODE_FAILURE_GRACE":       "45s",
		"GPUFABRIC_REPLACEMENT_TIMEOUT":      "2m",
		"GPUFABRIC_MEMBER_LOSS_POLICY":       "Fail",

		"GPUFABRIC_SPARE_NODES_PER_DOMAIN": "2",
		"GPUFABRIC_SPARE_LEVEL":            "rack",
		"GPUFABRIC_SPARES_FOR_NEW_GANGS":   "true",
		"GPUFABRIC_LARGE_GANG_GPUS":        "32",
	}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	if err := applyEnv(fs, lookup); err != nil {
		t.Fatal(err)
	}
	if o.domainChannels != 3 || o.leaderElect || o.kubeconfig != "/tmp/kc" || o.commitWorkers != 32 || o.commitsInFlight != 3 || o.apiQPS != 50.5 || o.apiBurst != 2000 ||
		o.leDurations.lease != 4*time.Second || o.leDurations.renew != 10*time.Second || o.recordNS != "gpufabric-system" || o.packOrder != "fullest-nodes" || !o.profiling || !o.domainMetrics || o.freeRoom != 30*time.Second ||
		o.budget != (placementBudget{calls: 500, time: 250 * time.Millisecond}) {
		t.Errorf("options %+v", o)
	}
	want := preemptionOptions{disabled: true, nominationTimeout: 90 * time.Second, budget: 2 * time.Second, starvationBound: 10 * time.Minute, unschedulableWait: time.Minute,
		reservationsPerNS: 2}
	if diff := cmp.Diff(want, o.preemption, cmp.AllowUnexported(preemptionOptions{})); diff != "" {
		t.Errorf("preemption options (-want +got):\n%s", diff)
	}
	if o.replace != (scheduler.ReplaceConfig{NodeFailureGrace: 45 * time.Second, ReplacementTimeout: 2 * time.Minute, Policy: "Fail"}) {
		t.Errorf("replace options %+v", o.replace)
	}
	if err := o.validate(); err != nil {
		t.Errorf("validate: %v", err)
	}
	if o.largeGangGPUs != 32 {
		t.Errorf("large gang GPUs %d, want 32 from GPUFABRIC_LARGE_GANG_GPUS", o.largeGangGPUs)
	}
	if o.spares != (spares.Policy{PerDomain: 2, Level: "rack", ForNewGangs: true}) {
		t.Errorf("spares %+v", o.spares)
	}
	if diff := cmp.Diff([]string{"rack", "leaf", "spine"}, o.levels()); diff != "" {
		t.Errorf("levels (-want +got):\n%s", diff)
	}
	if o.serving.certFile != "/tls/tls.crt" || o.serving.keyFile != "/tls/tls.key" || !cmp.Equal(o.serving.paths(), []string{"/livez", "/metrics"}) {
		t.Errorf("serving options %+v", o.serving)
	}
	env["GPUFABRIC_REQUIRE_ADMIN_TOPOLOGY_LABELS"] = "true"
	if !bindFlagsAndEnv(t, flag.NewFlagSet("test", flag.ContinueOnError), lookup).requireAdminLabels {
		t.Error("GPUFABRIC_REQUIRE_ADMIN_TOPOLOGY_LABELS not applied")
	}
	delete(env, "GPUFABRIC_REQUIRE_ADMIN_TOPOLOGY_LABELS")
	env["GPUFABRIC_LEADER_ELECT"] = "maybe"
	fresh := flag.NewFlagSet("test", flag.ContinueOnError)
	bindFlags(fresh)
	if err := applyEnv(fresh, lookup); err == nil {
		t.Error("bad boolean accepted")
	}
}

// TestValidate: durations a scheduler cannot work with are refused with
// the flag's name; the defaults pass and reservations are on.
func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		wantErr string
	}{
		{args: nil},
		{args: []string{"--starvation-bound=0"}},
		{args: []string{"--starvation-bound=500ms"}, wantErr: "--starvation-bound must be 0 (off) or at least 1s"},
		{args: []string{"--starvation-bound=-1s"}, wantErr: "--starvation-bound must be at least 0s"},
		{args: []string{"--nomination-timeout=0"}, wantErr: "--nomination-timeout must be at least 1s"},
		{args: []string{"--preemption-budget=1ms"}, wantErr: "--preemption-budget must be at least 10ms"},
		{args: []string{"--max-unschedulable-wait=0s"}, wantErr: "--max-unschedulable-wait must be at least 1s"},
		{args: []string{"--free-room-interval=0"}},
		{args: []string{"--member-loss-policy=Wait", "--replacement-timeout=1h", "--node-failure-grace=1s"}},
		{args: []string{"--member-loss-policy=restart"}, wantErr: `member loss policy "restart": want Wait, Restart or Fail`},
		{args: []string{"--replacement-timeout=2h"}, wantErr: "replacement timeout 2h0m0s: want 0s..1h0m0s"},
		{args: []string{"--node-failure-grace=0s"}, wantErr: "--node-failure-grace and --replacement-timeout must be more than 0s"},
		{args: []string{"--free-room-interval=100ms"}, wantErr: "--free-room-interval must be 0 (off) or at least 1s"},
		{args: []string{"--free-room-interval=-1s"}, wantErr: "--free-room-interval must be at least 0s"},
		{args: []string{"--commits-in-flight=0"}, wantErr: "--commits-in-flight must be 1..256, got 0"},
		{args: []string{"--placement-allocate-calls=0"}, wantErr: "--placement-allocate-calls must be at least 1, got 0"},
		{args: []string{"--placement-time-budget=1ms"}, wantErr: "--placement-time-budget must be at least 10ms"},
		{args: []string{"--commits-in-flight=1"}},
		{args: []string{"--starvation-reservations-per-namespace=0"}, wantErr: "--starvation-reservations-per-namespace must be at least 1, got 0"},
		{args: []string{"--starvation-reservations-per-namespace=3"}},
		{args: []string{"--kube-api-content-type=application/json"}},
		{args: []string{"--pack-order=fullest-nodes"}},
		{args: []string{"--pack-order=least-spread"}},
		{args: []string{"--large-gang-gpus=0"}},
		{args: []string{"--large-gang-gpus=-1"}, wantErr: "--large-gang-gpus must be 0 (off) or more, got -1"},
		{args: []string{"--pack-order=spread"}, wantErr: `--pack-order: pack order "spread" is not one of "least-spread", "fullest-nodes"`},
		{args: []string{"--tls-cert-file=/tls/tls.crt"}, wantErr: "--tls-cert-file and --tls-private-key-file go together"},
		{args: []string{"--tls-cert-file=/tls/tls.crt", "--tls-private-key-file=/tls/tls.key"}},
		{args: []string{"--require-admin-topology-labels", "--topology-levels=topology.gpufabric.dev/rack"}, wantErr: `--require-admin-topology-labels: topology level "topology.gpufabric.dev/rack" is a label kubelets can set`},
		{args: []string{"--require-admin-topology-labels", "--topology-levels=node-restriction.kubernetes.io/gpufabric.rack"}},
		{args: []string{"--spare-nodes-per-domain=2"}},
		{args: []string{"--spare-nodes-per-domain=2", "--spare-level=rack", "--topology-levels=rack"}},
		{args: []string{"--spare-nodes-per-domain=-1"}, wantErr: "--spare-nodes-per-domain, --spare-level: spare nodes per domain must be 0..1024, got -1"},
		{args: []string{"--spare-level=rack"}, wantErr: `spare level "rack" is no level of the fabric`},
		{args: []string{"--kube-api-content-type=yaml"}, wantErr: `--kube-api-content-type must be application/vnd.kubernetes.protobuf or application/json, got "yaml"`},
	} {
		fs := flag.NewFlagSet("test", flag.ContinueOnError)
		o := bindFlags(fs)
		if err := fs.Parse(tc.args); err != nil {
			t.Fatal(err)
		}
		err := o.validate()
		if got := fmt.Sprint(err); (tc.wantErr == "" && err != nil) || (tc.wantErr != "" && !strings.Contains(got, tc.wantErr)) {
			t.Errorf("%v: error %v, want %q", tc.args, err, tc.wantErr)
		}
		if tc.args == nil && o.preemption.starvationBound != defaultStarvationBound {
			t.Errorf("default starvation bound %s, want %s", o.preemption.starvationBound, defaultStarvationBound)
		}
	}
}

// TestProfiling: with --profiling the metrics port also serves Go's
// profiles under /debug/pprof/ (a CPU profile streams for its ?seconds=,
// capped); without it those paths are 404 and /metrics is served either
// way; every path but the health endpoints needs an authorized token.
func TestProfiling(t *testing.T) {
	for _, on := range []bool{false, true} {
		t.Run(fmt.Sprintf("profiling=%t", on), func(t *testing.T) {
			fs := flag.NewFlagSet("test", flag.ContinueOnError)
			o := bindFlags(fs)
			if err := fs.Parse([]string{"--metrics-address=127.0.0.1:0", fmt.Sprintf("--profiling=%t", on)}); err != nil {
				t.Fatal(err)
			}
			if err := o.validate(); err != nil {
				t.Fatal(err)
			}
			health := func(mux *http.ServeMux) {
				mux.HandleFunc("/livez", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
			}
			addr, err := o.serve(t.Context(), prometheus.NewRegistry(), fakeAuth(t, o.serving.paths()), health)
			if err != nil {
				t.Fatal(err)
			}
			base := "https://" + addr.String()
			wantPprof := http.StatusNotFound
			if on {
				wantPprof = http.StatusOK
			}
			for _, tc := range []struct {
				path, token string
				want        int
			}{
				{"/livez", "", http.StatusOK},
				{"/metrics", "", http.StatusUnauthorized},
				{"/metrics", "reader", http.StatusOK},
				{"/metrics", "nobody", http.StatusForbidden},
				{"/debug/pprof/", "", http.StatusUnauthorized},
				{"/debug/pprof/", "nobody", http.StatusForbidden},
				{"/debug/pprof/", "reader", wantPprof},
				{"/debug/pprof/goroutine?debug=1", "reader", wantPprof},
				{"/debug/pprof/profile?seconds=1", "reader", wantPprof},
				{"/debug/pprof/cmdline", "reader", wantPprof},
				{"/debug/pprof/trace?seconds=0.1", "reader", wantPprof},
				{"/debug/pprof/heap?gc=1", "reader", wantPprof},
				{"/debug/pprof/profile?seconds=600", "reader", map[bool]int{false: 404, true: 400}[on]},
			} {
				code, body := httpGet(t, base+tc.path, tc.token)
				if code != tc.want {
					t.Errorf("GET %s (token %q): %d, want %d", tc.path, tc.token, code, tc.want)
				}
				if on && tc.path == "/debug/pprof/profile?seconds=1" && (len(body) < 2 || body[0] != 0x1f || body[1] != 0x8b) {
					t.Errorf("GET %s: not a gzipped profile (%d bytes)", tc.path, len(body))
				}
			}
		})
	}
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	o := bindFlags(fs)
	if err := fs.Parse([]string{"--metrics-address=", "--profiling"}); err != nil {
		t.Fatal(err)
	}
	if err := o.validate(); err == nil || !strings.Contains(err.Error(), "--profiling needs --metrics-address") {
		t.Errorf("--profiling without an address: %v", err)
	}
}

// fakeAuth is the metrics port's filter on a fake apiserver: token
// "reader" may get /metrics and /debug/pprof/*, token "nobody" nothing.
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
		sar.Status.Allowed = sar.Spec.User == "reader" && sar.Spec.NonResourceAttributes.Verb == "get" && (p == "/metrics" || strings.HasPrefix(p, "/debug/pprof/"))
		return true, sar, nil
	})
	auth, err := delegatedauth.New(delegatedauth.Config{TokenReviews: c.AuthenticationV1().TokenReviews(), SubjectAccessReviews: c.AuthorizationV1().SubjectAccessReviews(), AlwaysAllowPaths: paths})
	if err != nil {
		t.Fatal(err)
	}
	return auth
}

// bindFlagsAndEnv binds the flags on fs and applies the environment.
func bindFlagsAndEnv(t *testing.T, fs *flag.FlagSet, lookup func(string) (string, bool)) *options {
	t.Helper()
	o := bindFlags(fs)
	if err := applyEnv(fs, lookup); err != nil {
		t.Fatal(err)
	}
	return o
}

func httpGet(t *testing.T, url, token string) (int, []byte) {
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
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read %s: %v", url, err)
	}
	return resp.StatusCode, body
}
