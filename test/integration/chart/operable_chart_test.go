package chart

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/gpufabric/gpufabric/test/integration/itest"
)

// monitoringAPIs make an offline `helm template` render as against a
// cluster that serves PodGroups and the Prometheus Operator's CRDs.
var monitoringAPIs = []string{"v1/Namespace", "scheduling.k8s.io/v1beta1/PodGroup", "monitoring.coreos.com/v1/ServiceMonitor", "monitoring.coreos.com/v1/PrometheusRule"}

// renderWith runs helm template with values files, --set flags and
// --api-versions, and returns its objects (built-in kinds decoded
// strictly, the Prometheus Operator's kept unstructured) or helm's error.
func renderWith(t *testing.T, helm, root string, values, sets, apiVersions []string) (*itest.Rendered, []*unstructured.Unstructured, error) {
	t.Helper()
	args := itest.TemplateArgs(itest.ChartReleaseName, itest.ChartNamespace, values, sets)
	for _, v := range apiVersions {
		args = append(args, "--api-versions", v)
	}
	out, err := itest.RunHelm(t.Context(), helm, root, args...)
	if err != nil {
		return nil, nil, err
	}
	var builtin bytes.Buffer
	var crds []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(out), 4096)
	for {
		var raw map[string]any
		if err := dec.Decode(&raw); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, nil, err
		}
		if len(raw) == 0 {
			continue
		}
		u := &unstructured.Unstructured{Object: raw}
		if u.GroupVersionKind().Group == "monitoring.coreos.com" {
			crds = append(crds, u)
			continue
		}
		js, err := json.Marshal(raw)
		if err != nil {
			return nil, nil, err
		}
		builtin.WriteString("---\n")
		builtin.Write(js)
		builtin.WriteString("\n")
	}
	r, err := itest.DecodeManifests(builtin.Bytes())
	return r, crds, err
}

// TestChartGitOpsValues: every escape hatch a GitOps user sets reaches
// the pods, the probes point at the health endpoints, the scheduler gets a
// PodDisruptionBudget only when replicated, and the monitoring objects
// select the metrics Services.
func TestChartGitOpsValues(t *testing.T) {
	helm, root := itest.HelmTool(t)
	values := filepath.Join(t.TempDir(), "gitops.yaml")
	component := `
  extraArgs: ["--kube-api-qps=300"]
  env:
  - {name: HTTPS_PROXY, value: "http://proxy:3128"}
  - name: TEAM
    valueFrom: {fieldRef: {fieldPath: "metadata.labels['team']"}}
  podLabels: {team: ml-platform}
  podAnnotations: {example.com/owner: platform}
  logFormat: json
  tolerations: [{key: dedicated, operator: Equal, value: gpu, effect: NoSchedule}]
  resources: {requests: {cpu: 250m, memory: 256Mi}, limits: {memory: 2Gi}}
  affinity:
    nodeAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
        nodeSelectorTerms: [{matchExpressions: [{key: pool, operator: In, values: [infra]}]}]
`
	data := "scheduler:" + component + "kubeletPlugin:" + strings.ReplaceAll(component, `["--kube-api-qps=300"]`, `["--health-interval=1m"]`) + `
monitoring:
  serviceMonitor: {enabled: true, interval: 15s, labels: {release: kube-prometheus-stack}}
  prometheusRule: {enabled: true, gangsWaitingFor: 45m, labels: {release: kube-prometheus-stack}}
`
	itest.Must(t, "write values", os.WriteFile(values, []byte(data), 0o600))
	r, crds, err := renderWith(t, helm, root, []string{values}, nil, monitoringAPIs)
	itest.Must(t, "render", err)

	for _, c := range []struct{ kind, name, arg string }{{"Deployment", itest.ChartSchedulerName, "--kube-api-qps=300"}, {"DaemonSet", itest.ChartPluginName, "--health-interval=1m"}} {
		tmpl := podTemplate(t, r, c.kind, c.name)
		spec, ctr := tmpl.Spec, tmpl.Spec.Containers[0]
		if !slices.Contains(ctr.Args, c.arg) || !slices.Contains(ctr.Args, "--logging-format=json") || ctr.Args[len(ctr.Args)-1] != c.arg {
			t.Errorf("%s args %q: want %s last and --logging-format=json", c.name, ctr.Args, c.arg)
		}
		env := map[string]corev1.EnvVar{}
		for _, e := range ctr.Env {
			env[e.Name] = e
		}
		if env["HTTPS_PROXY"].Value != "http://proxy:3128" || env["TEAM"].ValueFrom == nil || env["TEAM"].ValueFrom.FieldRef.FieldPath != "metadata.labels['team']" {
			t.Errorf("%s env %+v", c.name, ctr.Env)
		}
		if tmpl.Labels["team"] != "ml-platform" || tmpl.Annotations["example.com/owner"] != "platform" || tmpl.Labels["app.kubernetes.io/component"] == "" {
			t.Errorf("%s pod labels %v, annotations %v", c.name, tmpl.Labels, tmpl.Annotations)
		}
		if got := nodeAffinityKeys(spec.Affinity); !slices.Equal(got, []string{"pool"}) || spec.Affinity.PodAntiAffinity != nil {
			t.Errorf("%s affinity %+v: want the given one instead of the chart's", c.name, spec.Affinity)
		}
		if !slices.ContainsFunc(spec.Tolerations, func(tl corev1.Toleration) bool { return tl.Key == "dedicated" && tl.Value == "gpu" }) {
			t.Errorf("%s tolerations %+v", c.name, spec.Tolerations)
		}
		if ctr.Resources.Requests.Cpu().String() != "250m" || ctr.Resources.Limits.Memory().String() != "2Gi" {
			t.Errorf("%s resources %+v", c.name, ctr.Resources)
		}
		checkProbes(t, c.name, ctr)
	}
	// Every scheduler argument is still a flag it defines.
	optionsGo := readFile(t, filepath.Join(root, "cmd/scheduler/options.go"))
	for _, a := range podTemplate(t, r, "Deployment", itest.ChartSchedulerName).Spec.Containers[0].Args {
		if m := regexp.MustCompile(`^--?([a-z-]+)`).FindStringSubmatch(a); m == nil || !strings.Contains(optionsGo, `"`+m[1]+`"`) {
			t.Errorf("scheduler arg %q is not a flag of cmd/scheduler/options.go", a)
		}
	}

	pdb := get[*policyv1.PodDisruptionBudget](t, r, "PodDisruptionBudget", itest.ChartSchedulerName)
	tmpl := podTemplate(t, r, "Deployment", itest.ChartSchedulerName)
	for k, v := range pdb.Spec.Selector.MatchLabels {
		if tmpl.Labels[k] != v {
			t.Errorf("PodDisruptionBudget selects %s=%s, which the scheduler's pods lack", k, v)
		}
	}
	if pdb.Spec.MaxUnavailable == nil || pdb.Spec.MaxUnavailable.IntValue() != 1 {
		t.Errorf("PodDisruptionBudget maxUnavailable %v, want 1", pdb.Spec.MaxUnavailable)
	}
	checkMonitoring(t, r, crds)

	single, _, err := renderWith(t, helm, root, nil, []string{"scheduler.replicas=1"}, nil)
	itest.Must(t, "render one replica", err)
	if _, ok := single.Typed["PodDisruptionBudget/"+itest.ChartSchedulerName]; ok {
		t.Error("a PodDisruptionBudget for one replica would block every drain")
	}
	if _, crds, err := renderWith(t, helm, root, nil, nil, nil); err != nil || len(crds) > 0 {
		t.Errorf("default render: %v, monitoring objects %d (want opt-in)", err, len(crds))
	}
}

// checkProbes: liveness on /livez, readiness on /readyz, on the metrics
// port; the plugin has a startup probe for hardware discovery.
func checkProbes(t *testing.T, name string, c corev1.Container) {
	t.Helper()
	for _, p := range []struct {
		what  string
		probe *corev1.Probe
		path  string
	}{{"liveness", c.LivenessProbe, "/livez"}, {"readiness", c.ReadinessProbe, "/readyz"}} {
		if p.probe == nil || p.probe.HTTPGet == nil || p.probe.HTTPGet.Path != p.path || p.probe.HTTPGet.Port.String() != "metrics" || p.probe.HTTPGet.Scheme != corev1.URISchemeHTTPS {
			t.Errorf("%s %s probe %+v, want GET %s over HTTPS on port metrics", name, p.what, p.probe, p.path)
		}
	}
	if name == itest.ChartPluginName && (c.StartupProbe == nil || c.StartupProbe.HTTPGet == nil || c.StartupProbe.HTTPGet.Path != "/livez" || c.StartupProbe.FailureThreshold*c.StartupProbe.PeriodSeconds < 120) {
		t.Errorf("plugin startup probe %+v, want /livez for minutes of discovery", c.StartupProbe)
	}
}

// checkMonitoring: a ServiceMonitor per component selecting its metrics
// Service's labels and port; a PrometheusRule with the five alerts.
func checkMonitoring(t *testing.T, r *itest.Rendered, crds []*unstructured.Unstructured) {
	t.Helper()
	monitors := map[string]*unstructured.Unstructured{}
	var rule *unstructured.Unstructured
	for _, u := range crds {
		switch u.GetKind() {
		case "ServiceMonitor":
			monitors[u.GetName()] = u
		case "PrometheusRule":
			rule = u
		}
		if u.GetLabels()["release"] != "kube-prometheus-stack" {
			t.Errorf("%s %s labels %v lack the selector label", u.GetKind(), u.GetName(), u.GetLabels())
		}
	}
	for _, name := range []string{itest.ChartPluginName, itest.ChartSchedulerName} {
		m, ok := monitors[name]
		if !ok {
			t.Errorf("no ServiceMonitor %s; have %v", name, monitors)
			continue
		}
		svc := get[*corev1.Service](t, r, "Service", name+"-metrics")
		sel, _, _ := unstructured.NestedStringMap(m.Object, "spec", "selector", "matchLabels")
		for k, v := range sel {
			if svc.Labels[k] != v {
				t.Errorf("ServiceMonitor %s selects %s=%s, which Service %s lacks", name, k, v, svc.Name)
			}
		}
		eps, _, _ := unstructured.NestedSlice(m.Object, "spec", "endpoints")
		if len(eps) != 1 || eps[0].(map[string]any)["port"] != "metrics" || eps[0].(map[string]any)["interval"] != "15s" {
			t.Errorf("ServiceMonitor %s endpoints %v", name, eps)
			continue
		}
		// The port is HTTPS and /metrics needs Prometheus's token.
		if ep := eps[0].(map[string]any); ep["scheme"] != "https" || ep["bearerTokenFile"] != "/var/run/secrets/kubernetes.io/serviceaccount/token" || ep["tlsConfig"] == nil {
			t.Errorf("ServiceMonitor %s endpoint %v: want scheme https, Prometheus's token and a tlsConfig", name, ep)
		}
	}
	if rule == nil {
		t.Fatal("no PrometheusRule")
	}
	alerts := alertRules(t, rule)
	for _, want := range []string{"GpufabricSchedulerNoLeader", "GpufabricGangsWaiting", "GpufabricCommitErrors", "GpufabricPrepareErrors", "GpufabricDoubleAllocationsRepaired"} {
		if _, ok := alerts[want]; !ok {
			t.Errorf("PrometheusRule lacks alert %s; has %v", want, alerts)
		}
	}
	if a := alerts["GpufabricGangsWaiting"]; a["for"] != "45m" {
		t.Errorf("GpufabricGangsWaiting for %v, want gangsWaitingFor 45m", a["for"])
	}
}

// alertRules are a PrometheusRule's alerting rules by name.
func alertRules(t *testing.T, rule *unstructured.Unstructured) map[string]map[string]any {
	t.Helper()
	groups, _, err := unstructured.NestedSlice(rule.Object, "spec", "groups")
	itest.Must(t, "rule groups", err)
	out := map[string]map[string]any{}
	for _, g := range groups {
		rules, _ := g.(map[string]any)["rules"].([]any)
		for _, r := range rules {
			m := r.(map[string]any)
			if name, ok := m["alert"].(string); ok {
				out[name] = m
			}
		}
	}
	return out
}

// TestChartRejectsBadGitOpsValues: the new values are schema-checked too.
func TestChartRejectsBadGitOpsValues(t *testing.T) {
	helm, root := itest.HelmTool(t)
	for _, c := range []struct {
		name string
		sets []string
		want string
	}{
		{name: "an argument that is not a flag", sets: []string{"scheduler.extraArgs[0]=kube-api-qps"}, want: "/scheduler/extraArgs/0"},
		{name: "env without a name", sets: []string{"kubeletPlugin.env[0].value=x"}, want: "/kubeletPlugin/env/0"},
		{name: "env with value and valueFrom", sets: []string{"scheduler.env[0].name=A", "scheduler.env[0].value=x", "scheduler.env[0].valueFrom.fieldRef.fieldPath=metadata.name"}, want: "/scheduler/env/0"},
		{name: "a pod label that moves the selector", sets: []string{`scheduler.podLabels.app\.kubernetes\.io/component=x`}, want: "app.kubernetes.io/component"},
		{name: "unknown log format", sets: []string{"kubeletPlugin.logFormat=yaml"}, want: "/kubeletPlugin/logFormat"},
		{name: "unknown affinity kind", sets: []string{"scheduler.affinity.nodeAfinity.x=y"}, want: "nodeAfinity"},
		{name: "a budget of no replica", sets: []string{"scheduler.podDisruptionBudget.maxUnavailable=0"}, want: "/scheduler/podDisruptionBudget/maxUnavailable"},
		{name: "unknown monitoring value", sets: []string{"monitoring.podMonitor.enabled=true"}, want: "'podMonitor' not allowed"},
		{name: "bad alert bound", sets: []string{"monitoring.prometheusRule.gangsWaitingFor=half an hour"}, want: "/monitoring/prometheusRule/gangsWaitingFor"},
		{name: "preflight not a switch", sets: []string{"preflight.allowNVIDIAGPUAllocators=maybe"}, want: "/preflight/allowNVIDIAGPUAllocators"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := itest.RenderChart(t.Context(), helm, root, nil, c.sets)
			if err == nil || !strings.Contains(err.Error(), "values don't meet the specifications of the schema") || !strings.Contains(err.Error(), c.want) {
				t.Errorf("want a schema error mentioning %q, got %v", c.want, err)
			}
		})
	}
}

// TestChartPreflightOffline: against a cluster (here: helm template given
// its API versions, kinds included, as helm has them when it talks to an
// apiserver) the chart refuses a cluster without PodGroups and monitoring
// without the Prometheus Operator's CRDs, saying how to fix it; an offline
// render without kinds cannot know and renders.
func TestChartPreflightOffline(t *testing.T) {
	helm, root := itest.HelmTool(t)
	cluster := []string{"v1/Namespace", "scheduling.k8s.io/v1beta1/PodGroup"}
	for _, c := range []struct {
		name        string
		sets, apis  []string
		wantFailure string
	}{
		{name: "offline", sets: []string{"monitoring.serviceMonitor.enabled=true"}},
		{name: "cluster with PodGroups", apis: cluster},
		{name: "cluster without PodGroups", apis: []string{"v1/Namespace"}, wantFailure: "the apiserver does not serve PodGroups (scheduling.k8s.io/v1beta1), which gpufabric-scheduler places. Enable them on kube-apiserver with --runtime-config=scheduling.k8s.io/v1beta1=true and --feature-gates=GenericWorkload=true"},
		{name: "cluster without PodGroups, check off", apis: []string{"v1/Namespace"}, sets: []string{"preflight.podGroupAPI=false"}},
		{name: "ServiceMonitor without the CRD", apis: cluster, sets: []string{"monitoring.serviceMonitor.enabled=true"}, wantFailure: "monitoring asks for a ServiceMonitor, but the apiserver does not serve monitoring.coreos.com/v1 ServiceMonitor: install the Prometheus Operator's CRDs first"},
		{name: "PrometheusRule without the CRD", apis: cluster, sets: []string{"monitoring.prometheusRule.enabled=true"}, wantFailure: "--set monitoring.prometheusRule.enabled=false"},
		{name: "both with the CRDs", apis: monitoringAPIs, sets: []string{"monitoring.serviceMonitor.enabled=true", "monitoring.prometheusRule.enabled=true"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, _, err := renderWith(t, helm, root, nil, c.sets, c.apis)
			switch {
			case c.wantFailure == "" && err != nil:
				t.Errorf("want a render, got %v", err)
			case c.wantFailure != "" && (err == nil || !strings.Contains(err.Error(), c.wantFailure)):
				t.Errorf("want a failure with %q, got %v", c.wantFailure, err)
			}
		})
	}
}

// defaultValues reads the chart's values.yaml into v.
func defaultValues(t *testing.T, root string, v any) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, itest.ChartDir, "values.yaml"))
	itest.Must(t, "read values", err)
	itest.Must(t, "parse values", yaml.Unmarshal(data, v))
}

// TestChartGPUNodeSelection: by default the plugin goes to nodes the GPU
// Operator or NFD labelled, or labelled gpufabric.dev/gpu-node=true (a
// node needs one of them); replacing gpuNodeSelectorTerms keeps the
// custom label working alone.
func TestChartGPUNodeSelection(t *testing.T) {
	helm, root := itest.HelmTool(t)
	var values struct {
		KubeletPlugin struct {
			GPUNodeSelectorTerms []corev1.NodeSelectorTerm `json:"gpuNodeSelectorTerms"`
		} `json:"kubeletPlugin"`
	}
	defaultValues(t, root, &values)
	if got := len(values.KubeletPlugin.GPUNodeSelectorTerms); got != 3 {
		t.Fatalf("%d default terms, want 3 (ORed)", got)
	}
	custom := filepath.Join(t.TempDir(), "custom.yaml")
	itest.Must(t, "write values", os.WriteFile(custom, []byte(`kubeletPlugin: {gpuNodeSelectorTerms: [{matchExpressions: [{key: gpufabric.dev/gpu-node, operator: In, values: ["true"]}]}]}`), 0o600))
	r, _, err := renderWith(t, helm, root, []string{custom}, nil, nil)
	itest.Must(t, "render custom label", err)
	ds := get[*appsv1.DaemonSet](t, r, "DaemonSet", itest.ChartPluginName)
	if got := nodeAffinityKeys(ds.Spec.Template.Spec.Affinity); !slices.Equal(got, []string{"gpufabric.dev/gpu-node"}) {
		t.Errorf("custom selection: node affinity keys %v", got)
	}
	terms := ds.Spec.Template.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	if fmt.Sprint(terms[0].MatchExpressions[0].Values) != "[true]" {
		t.Errorf("custom term %+v", terms)
	}
}
