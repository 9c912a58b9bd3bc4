package chart

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/gpufabric/gpufabric/test/integration/framework"
	"github.com/gpufabric/gpufabric/test/integration/itest"
)

// dashboardFile is the Grafana dashboard the project ships.
const dashboardFile = "deployments/helm/gpufabric/files/grafana/gpufabric-dashboard.json"

// TestDashboardMetrics: every metric the shipped Grafana dashboard queries
// is exposed by the real processes (gpufabric-scheduler and the kubelet
// plugin, scraped over HTTP right after they start, before any gang or
// error: every labelled series exists from the start), and the dashboard
// shows what an operator alerts on.
func TestDashboardMetrics(t *testing.T) {
	cp, _, pluginKubeconfig := itest.PluginEnv(t, "gb200-r1-n01")
	root, err := framework.RepoRoot()
	itest.Must(t, "repo root", err)

	schedAddr, pluginAddr := freeAddr(t), freeAddr(t)
	token := itest.EndpointToken(t, cp.AdminClient(t), "dashboard-prometheus", "/metrics")
	const user = "dashboard-scheduler"
	itest.Must(t, "grant scheduler rules", framework.GrantSchedulerRules(t.Context(), cp.AdminClient(t), user, itest.RecordNamespace))
	kc, err := cp.WriteUserKubeconfig(user)
	itest.Must(t, "kubeconfig", err)
	itest.Must(t, "start scheduler", cp.StartProcess("scheduler", framework.SchedulerBinary(t), "--kubeconfig="+kc,
		"--leader-elect=false", "--commit-record-namespace="+itest.RecordNamespace, "--metrics-address="+schedAddr))
	plugin := framework.NewPlugin(t, pluginKubeconfig, itest.GB200Fabric, "gb200-r1-n01")
	plugin.ExtraArgs = []string{"--metrics-address=" + pluginAddr}
	plugin.Start()

	used, err := dashboardMetrics(filepath.Join(root, dashboardFile))
	itest.Must(t, "read dashboard", err)
	// free_gpus and largest_free_domain_gpus have their per-level series
	// once the scheduler refreshed its gauges (at start, then every 15 s).
	itest.Poll(t, "every metric of the dashboard exposed", 60*time.Second, func(ctx context.Context) error {
		exposed := map[string]bool{}
		for _, addr := range []string{schedAddr, pluginAddr} {
			if err := scrape(ctx, addr, token, exposed); err != nil {
				return err
			}
		}
		var missing []string
		for _, m := range used {
			if !exposed[m] {
				missing = append(missing, m)
			}
		}
		if len(missing) > 0 {
			return fmt.Errorf("the dashboard queries %v, which no process exposes", missing)
		}
		return nil
	})
	for _, want := range []string{
		"gpufabric_scheduler_queue_gangs", "gpufabric_scheduler_pending_gangs", "gpufabric_scheduler_attempt_duration_seconds",
		"gpufabric_scheduler_commit_phase_duration_seconds", "gpufabric_scheduler_free_gpus", "gpufabric_scheduler_largest_free_domain_gpus",
		"gpufabric_kubelet_plugin_prepare_errors_total",
	} {
		if !contains(used, want) {
			t.Errorf("the dashboard does not show %s", want)
		}
	}
}

// scrape adds the metric families an endpoint exposes (histograms under
// their _bucket, _sum and _count names too), scraped with token.
func scrape(ctx context.Context, addr, token string, into map[string]bool) error {
	code, body, err := itest.EndpointGet(ctx, addr, "/metrics", token)
	if err != nil {
		return err
	}
	if code != http.StatusOK {
		return fmt.Errorf("scrape %s: %d %s", addr, code, body)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("parse metrics of %s: %w", addr, err)
	}
	n := 0
	for name, f := range families {
		if len(f.GetMetric()) == 0 {
			continue
		}
		into[name] = true
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			into[name+suffix] = true
		}
		if strings.HasPrefix(name, "gpufabric_") {
			n++
		}
	}
	if n == 0 {
		return fmt.Errorf("%s exposes no gpufabric metric yet", addr)
	}
	return nil
}

var metricName = regexp.MustCompile(`gpufabric_[a-z0-9_]+`)

// dashboardMetrics lists the metric names the dashboard's queries use.
func dashboardMetrics(path string) ([]string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var dash struct {
		Panels []struct {
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(data, &dash); err != nil {
		return nil, fmt.Errorf("parse %s: %w", path, err)
	}
	seen := map[string]bool{}
	var out []string
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			for _, m := range metricName.FindAllString(tg.Expr, -1) {
				if !seen[m] {
					seen[m] = true
					out = append(out, m)
				}
			}
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s queries no gpufabric metric", path)
	}
	return out, nil
}

func contains(used []string, family string) bool {
	for _, m := range used {
		if m == family || strings.TrimSuffix(strings.TrimSuffix(m, "_bucket"), "_count") == family {
			return true
		}
	}
	return false
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	itest.Must(t, "free port", err)
	defer l.Close()
	return l.Addr().String()
}
