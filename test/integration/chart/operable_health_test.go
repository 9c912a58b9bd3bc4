package chart

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"

	"github.com/gpufabric/gpufabric/pkg/component/metricstyle"
	"github.com/gpufabric/gpufabric/test/integration/framework"
	"github.com/gpufabric/gpufabric/test/integration/itest"
)

// checkHealth GETs path on addr (HTTPS, no token: the health endpoints
// answer anyone) and wants the status code and, when want is set, a body
// containing it.
func checkHealth(ctx context.Context, addr, path string, code int, want string) error {
	got, body, err := itest.EndpointGet(ctx, addr, path, "")
	if err != nil {
		return err
	}
	if got != code || !strings.Contains(string(body), want) {
		return fmt.Errorf("GET %s: %d %q, want %d with %q", path, got, body, code, want)
	}
	return nil
}

// TestSchedulerWithoutPodGroupAPI: on an apiserver that does not serve
// scheduling.k8s.io/v1beta1, helm refuses to install the chart, and a
// running gpufabric-scheduler is live but not ready, its /readyz and its
// log naming the missing API and the runtime-config and gate that enable
// it, instead of waiting for its informers forever looking healthy.
func TestSchedulerWithoutPodGroupAPI(t *testing.T) {
	helm, root := itest.HelmTool(t)
	cp := framework.StartT(t, framework.Options{WithoutPodGroupAPI: true})
	ctx := t.Context()
	admin := cp.AdminClient(t)

	_, err := helmOn(ctx, cp, helm, root, installArgs()...)
	if err == nil || !strings.Contains(err.Error(), "the apiserver does not serve PodGroups (scheduling.k8s.io/v1beta1)") ||
		!strings.Contains(err.Error(), "--runtime-config=scheduling.k8s.io/v1beta1=true") {
		t.Errorf("helm install without the PodGroup API: %v", err)
	}

	const user = "no-podgroups-scheduler"
	itest.Must(t, "grant scheduler rules", framework.GrantSchedulerRules(ctx, admin, user, itest.RecordNamespace))
	kc, err := cp.WriteUserKubeconfig(user)
	itest.Must(t, "kubeconfig", err)
	addr := freeAddr(t)
	itest.Must(t, "start scheduler", cp.StartProcess("no-podgroups", framework.SchedulerBinary(t), "--kubeconfig="+kc, "--leader-elect=false",
		"--commit-record-namespace="+itest.RecordNamespace, "--metrics-address="+addr, "--informer-sync-timeout=3s"))
	const missing = "the apiserver does not serve scheduling.k8s.io/v1beta1 podgroups, which gpufabric-scheduler reads: start kube-apiserver with --runtime-config=scheduling.k8s.io/v1beta1=true and --feature-gates=GenericWorkload=true"
	itest.Poll(t, "not ready, naming the missing API", 30*time.Second, func(ctx context.Context) error {
		if err := checkHealth(ctx, addr, "/readyz?verbose", 500, "[-]api-served failed: "+missing); err != nil {
			return err
		}
		return checkHealth(ctx, addr, "/readyz/informer-sync", 500, "[-]informer-sync failed: informers not synced after")
	})
	if err := checkHealth(ctx, addr, "/readyz/informer-sync", 500, "podgroups.v1beta1.scheduling.k8s.io; "+missing); err != nil {
		t.Error(err)
	}
	for _, path := range []string{"/livez", "/healthz"} {
		if err := checkHealth(ctx, addr, path, 200, "ok"); err != nil {
			t.Errorf("a missing API is no reason to restart: %v", err)
		}
	}
	itest.Poll(t, "the log says why", 30*time.Second, func(context.Context) error {
		data, err := os.ReadFile(cp.ProcessLog("no-podgroups"))
		if err != nil {
			return err
		}
		if !strings.Contains(string(data), "The scheduler is not ready and schedules nothing until this is fixed") || !strings.Contains(string(data), "--runtime-config=scheduling.k8s.io/v1beta1=true") {
			return fmt.Errorf("log lacks the error")
		}
		return nil
	})
}

// TestComponentsOperable runs gpufabric-scheduler (leader election) and
// the kubelet plugin as processes, with JSON logs, and checks what an
// operator relies on: --version, the version and commit in the first log
// line and in gpufabric_<component>_build_info, client-go's metrics
// (workqueues, REST client, leader election), /livez and /readyz through
// the plugin's registration with the kubelet and a socket gone, that
// every label value but names and addresses is snake_case
// (metricstyle), and that every metric the chart's alerts query is
// exposed.
func TestComponentsOperable(t *testing.T) {
	helm, root := itest.HelmTool(t)
	const nodeName = "gb200-r1-n01"
	cp, _, pluginKubeconfig := itest.PluginEnv(t, nodeName)
	ctx := t.Context()
	schedAddr, pluginAddr := freeAddr(t), freeAddr(t)
	token := itest.EndpointToken(t, cp.AdminClient(t), "operable-prometheus", "/metrics")
	const user = "operable-scheduler"
	itest.Must(t, "grant scheduler rules", framework.GrantSchedulerRules(ctx, cp.AdminClient(t), user, itest.RecordNamespace))
	kc, err := cp.WriteUserKubeconfig(user)
	itest.Must(t, "kubeconfig", err)
	schedBin, pluginBin := framework.SchedulerBinary(t), framework.PluginBinary(t)
	itest.Must(t, "start scheduler", cp.StartProcess("operable-scheduler", schedBin, "--kubeconfig="+kc, "--leader-elect=true",
		"--leader-elect-namespace="+itest.RecordNamespace, "--leader-elect-identity=operable-0", "--commit-record-namespace="+itest.RecordNamespace,
		"--metrics-address="+schedAddr, "--logging-format=json"))
	plugin := framework.NewPlugin(t, pluginKubeconfig, itest.GB200Fabric, nodeName)
	plugin.ExtraArgs = []string{"--metrics-address=" + pluginAddr, "--logging-format=json"}
	plugin.Start()

	itest.Poll(t, "scheduler leads and is ready", 60*time.Second, func(ctx context.Context) error {
		return checkHealth(ctx, schedAddr, "/readyz?verbose", 200, "[+]leaderElection ok\n[+]api-served ok\n[+]informer-sync ok")
	})
	itest.Poll(t, "plugin live, not ready before the kubelet registered it", 60*time.Second, func(ctx context.Context) error {
		if err := checkHealth(ctx, pluginAddr, "/livez?verbose", 200, "[+]sockets ok"); err != nil {
			return err
		}
		return checkHealth(ctx, pluginAddr, "/readyz?verbose", 500, "[-]registration failed: the kubelet has not registered the plugin yet")
	})
	registerLikeKubelet(t, framework.RegistrationSocket(plugin.RegistrarDir()))
	itest.Poll(t, "plugin ready once registered", 30*time.Second, func(ctx context.Context) error {
		return checkHealth(ctx, pluginAddr, "/readyz?verbose", 200, "[+]registration ok")
	})

	for _, c := range []struct {
		name, bin, log, addr, metric, firstMsg string
	}{
		{"gpufabric-scheduler", schedBin, cp.ProcessLog("operable-scheduler"), schedAddr, "gpufabric_scheduler_build_info", "Starting gpufabric-scheduler"},
		{"kubelet-plugin", pluginBin, plugin.LogFile(), pluginAddr, "gpufabric_kubelet_plugin_build_info", "Starting gpufabric kubelet plugin"},
	} {
		commit := versionCommit(t, c.bin, c.name)
		first := firstLogLine(t, c.log)
		if first["msg"] != c.firstMsg || first["version"] == nil || first["commit"] != commit {
			t.Errorf("%s first log line %v, want %q with version and commit %s", c.name, first, c.firstMsg, commit)
		}
		families := scrapeFamilies(t, c.addr, token)
		info := families[c.metric]
		if info == nil || len(info.GetMetric()) != 1 || labelValue(info.GetMetric()[0].GetLabel(), "commit") != commit ||
			!strings.HasPrefix(labelValue(info.GetMetric()[0].GetLabel(), "go_version"), "go") {
			t.Errorf("%s: %s %v, want commit %s", c.name, c.metric, info, commit)
		}
		if families["rest_client_requests_total"] == nil || families["rest_client_request_duration_seconds"] == nil {
			t.Errorf("%s exposes no REST client metrics", c.name)
		}
	}
	sched := scrapeFamilies(t, schedAddr, token)
	for _, q := range []string{"gangs", "double_allocations", "fabric_domain_pools"} {
		if !hasSeries(sched["workqueue_depth"], "name", q) || !hasSeries(sched["workqueue_adds_total"], "name", q) {
			t.Errorf("scheduler exposes no workqueue metrics of queue %s", q)
		}
	}
	if le := sched["leader_election_master_status"]; !hasSeries(le, "name", "gpufabric-scheduler") || le.GetMetric()[0].GetGauge().GetValue() != 1 {
		t.Errorf("leader_election_master_status %v, want 1 for gpufabric-scheduler", le)
	}
	pluginFams := scrapeFamilies(t, pluginAddr, token)
	for name, fams := range map[string]map[string]*dto.MetricFamily{"scheduler": sched, "plugin": pluginFams} {
		if bad := metricstyle.Check(metricstyle.Families(fams), metricstyle.Exempt); len(bad) > 0 {
			t.Errorf("%s: label values not snake_case: %v", name, bad)
		}
	}
	checkAlertMetrics(t, helm, root, sched, pluginFams)
	checkMetricsDocumented(t, root, sched, pluginFams)

	dra := filepath.Join(plugin.PluginDir(), "dra.sock")
	itest.Must(t, "remove the DRA socket", os.Remove(dra))
	itest.Poll(t, "plugin not live once its DRA socket is gone", 30*time.Second, func(ctx context.Context) error {
		return checkHealth(ctx, pluginAddr, "/livez?verbose", 500, "[-]sockets failed: DRA socket "+dra)
	})
	itest.Must(t, "stop scheduler", cp.Signal("operable-scheduler", syscall.SIGTERM))
}

// registerLikeKubelet does what the kubelet's plugin watcher does with a
// new registration socket: GetInfo, then NotifyRegistrationStatus.
func registerLikeKubelet(t *testing.T, regSock string) {
	t.Helper()
	if _, err := framework.RegistrationInfo(t.Context(), regSock); err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient("unix://"+regSock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	itest.Must(t, "dial registration socket", err)
	defer conn.Close()
	_, err = registerapi.NewRegistrationClient(conn).NotifyRegistrationStatus(t.Context(), &registerapi.RegistrationStatus{PluginRegistered: true})
	itest.Must(t, "notify registration", err)
}

var commitOf = regexp.MustCompile(`\(commit (\S+),`)

// versionCommit runs `bin --version` and returns the commit it prints.
func versionCommit(t *testing.T, bin, name string) string {
	t.Helper()
	out, err := exec.CommandContext(t.Context(), bin, "--version").Output()
	itest.Must(t, name+" --version", err)
	m := commitOf.FindStringSubmatch(string(out))
	if !strings.HasPrefix(string(out), name+" ") || m == nil {
		t.Fatalf("%s --version: %q", name, out)
	}
	return m[1]
}

// firstLogLine decodes the first line of a JSON log.
func firstLogLine(t *testing.T, path string) map[string]any {
	t.Helper()
	f, err := os.Open(path)
	itest.Must(t, "open log", err)
	defer f.Close()
	line, err := bufio.NewReader(f).ReadBytes('\n')
	itest.Must(t, "read log", err)
	var m map[string]any
	if err := json.Unmarshal(line, &m); err != nil {
		t.Fatalf("first log line of %s is not JSON (--logging-format=json): %q", path, line)
	}
	return m
}

// scrapeFamilies reads an endpoint's metric families with token.
func scrapeFamilies(t *testing.T, addr, token string) map[string]*dto.MetricFamily {
	t.Helper()
	code, body, err := itest.EndpointGet(t.Context(), addr, "/metrics", token)
	itest.Must(t, "scrape "+addr, err)
	if code != http.StatusOK {
		t.Fatalf("scrape %s: %d %s", addr, code, body)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(body))
	itest.Must(t, "parse metrics", err)
	return families
}

func labelValue(labels []*dto.LabelPair, name string) string {
	for _, l := range labels {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

func hasSeries(f *dto.MetricFamily, label, value string) bool {
	if f == nil {
		return false
	}
	for _, m := range f.GetMetric() {
		if labelValue(m.GetLabel(), label) == value {
			return true
		}
	}
	return false
}

var promMetric = regexp.MustCompile(`[a-z_]+_[a-z_]+(?:\{|\[| )`)

// checkAlertMetrics: every metric the chart's PrometheusRule queries is
// exposed by the processes (an alert on a metric nobody exposes never
// fires).
func checkAlertMetrics(t *testing.T, helm, root string, exposed ...map[string]*dto.MetricFamily) {
	t.Helper()
	_, crds, err := renderWith(t, helm, root, nil, []string{"monitoring.prometheusRule.enabled=true"}, nil)
	itest.Must(t, "render the PrometheusRule", err)
	if len(crds) != 1 {
		t.Fatalf("%d monitoring objects, want the PrometheusRule", len(crds))
	}
	for name, rule := range alertRules(t, crds[0]) {
		expr, _ := rule["expr"].(string)
		for _, m := range promMetric.FindAllString(expr, -1) {
			m = strings.TrimRight(m, "{[ ")
			found := false
			for _, e := range exposed {
				found = found || e[m] != nil
			}
			if !found {
				t.Errorf("alert %s queries %s, which no process exposes", name, m)
			}
		}
	}
}

// TestBuildStampsVersion: a binary built with `make ldflags` prints the
// commit of the tree it was built from.
func TestBuildStampsVersion(t *testing.T) {
	root, err := framework.RepoRoot()
	itest.Must(t, "repo root", err)
	ldflags, err := exec.CommandContext(t.Context(), "make", "-s", "-C", root, "ldflags").Output()
	itest.Must(t, "make ldflags", err)
	head, err := exec.CommandContext(t.Context(), "git", "-C", root, "rev-parse", "HEAD").Output()
	itest.Must(t, "git rev-parse", err)
	bin := filepath.Join(t.TempDir(), "gpufabric-sim")
	build := exec.CommandContext(t.Context(), "go", "build", "-ldflags", strings.TrimSpace(string(ldflags)), "-o", bin, "./cmd/gpufabric-sim")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	if got := versionCommit(t, bin, "gpufabric-sim"); strings.TrimSuffix(got, "-dirty") != strings.TrimSpace(string(head)) {
		t.Errorf("stamped commit %s, want %s", got, head)
	}
}

// metricsDoc is the metrics reference users read.
const metricsDoc = "docs/metrics.md"

// checkMetricsDocumented: every gpufabric_ metric the processes expose,
// and every alert the chart ships, is in the metrics reference.
func checkMetricsDocumented(t *testing.T, root string, exposed ...map[string]*dto.MetricFamily) {
	t.Helper()
	doc := readFile(t, filepath.Join(root, metricsDoc))
	for _, e := range exposed {
		for name := range e {
			if strings.HasPrefix(name, "gpufabric_") && !strings.Contains(doc, "`"+name+"`") {
				t.Errorf("%s is exposed but not in %s", name, metricsDoc)
			}
		}
	}
	for _, alert := range []string{"GpufabricSchedulerNoLeader", "GpufabricGangsWaiting", "GpufabricCommitErrors", "GpufabricPrepareErrors", "GpufabricDoubleAllocationsRepaired"} {
		if !strings.Contains(doc, "`"+alert+"`") {
			t.Errorf("alert %s is not in %s", alert, metricsDoc)
		}
	}
}
