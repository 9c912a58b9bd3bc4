package chart

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/utils/ptr"

	"github.com/gpufabric/gpufabric/pkg/devices/mock"
	"github.com/gpufabric/gpufabric/test/integration/framework"
	"github.com/gpufabric/gpufabric/test/integration/itest"
)

// Names of the chart's objects for release "gpufabric".
const (
	pluginUser    = "system:serviceaccount:" + itest.ChartNamespace + ":" + itest.ChartPluginName
	schedulerUser = "system:serviceaccount:" + itest.ChartNamespace + ":" + itest.ChartSchedulerName
)

// TestChartLint runs helm lint --strict with the default and the mock values.
func TestChartLint(t *testing.T) {
	helm, root := itest.HelmTool(t)
	for _, values := range [][]string{nil, {mockValuesFile}} {
		t.Run(strings.Join(append([]string{"default"}, values...), "+"), func(t *testing.T) {
			args := []string{"lint", itest.ChartDir, "--strict", "--kube-version", itest.ChartKubeVersion}
			for _, f := range values {
				args = append(args, "--values", f)
			}
			if _, err := itest.RunHelm(t.Context(), helm, root, args...); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// chartProfile is a set of values and what the rendered chart must contain.
type chartProfile struct {
	name              string
	values            []string
	sets              []string
	mock              bool
	privileged        bool
	leaderElect       bool
	replicas          int32
	deviceClasses     bool
	policy            bool
	metrics           bool
	gpuNodeLabels     []string
	schedulerArgsWant []string
	// lease is the Lease name the scheduler's Role may renew.
	lease string
	// freeRoomReaders are the groups the free-room view's reader Role is
	// bound to; none: no such Role.
	freeRoomReaders []string
	// gpuExtendedResourceName is gpu.gpufabric.dev's
	// spec.extendedResourceName ("": none).
	gpuExtendedResourceName string
}

// defaultGPUNodeLabels are the keys of the default GPU node selection, one
// term each: the GPU Operator's, Node Feature Discovery's, gpufabric's own.
var defaultGPUNodeLabels = []string{"nvidia.com/gpu.present", "feature.node.kubernetes.io/pci-10de.present", "gpufabric.dev/gpu-node"}

// TestChartTemplate renders the chart with each profile and checks what
// the issue asks of every object; every object decodes strictly.
func TestChartTemplate(t *testing.T) {
	helm, root := itest.HelmTool(t)
	custom := filepath.Join(t.TempDir(), "custom.yaml")
	if err := os.WriteFile(custom, []byte(`
deviceClasses: {create: false}
kubeletPlugin:
  restrictResourceSlices: false
  gpuNodeSelectorTerms:
  - matchExpressions: [{key: nvidia.com/gpu.present, operator: In, values: ["true"]}]
  metrics: {enabled: false, port: 9000}
scheduler:
  replicas: 1
  leaderElection: {enabled: false, leaseName: x}
  antiAffinity: required
  metrics: {enabled: false, port: 9000}
  preemption: {enabled: false, nominationTimeout: 90s, starvationBound: 0s}
  commitsInFlight: 2
  packOrder: fullest-nodes
  freeRoom: {enabled: false, interval: 30s, readerGroups: [system:authenticated]}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	profiles := []chartProfile{
		{
			name: "default", privileged: true, leaderElect: true, replicas: 2, deviceClasses: true, policy: true, metrics: true,
			gpuNodeLabels: defaultGPUNodeLabels, lease: itest.ChartSchedulerName, freeRoomReaders: []string{"system:authenticated"},
			schedulerArgsWant: []string{"--leader-elect=true", "--leader-elect-namespace=$(POD_NAMESPACE)", "--leader-elect-identity=$(POD_NAME)",
				"--commit-record-namespace=$(POD_NAMESPACE)", "--topology-levels=", "--domain-channels=8", "--commits-in-flight=8", "--pack-order=least-spread", "--metrics-address=:8080",
				"--profiling=false", "--require-admin-topology-labels=false", "--disable-preemption=false", "--nomination-timeout=5m", "--starvation-bound=30m", "--free-room-interval=10s"},
		},
		{
			name: "mock", values: []string{mockValuesFile}, sets: []string{"scheduler.profiling=true", "scheduler.freeRoom.readerGroups={team-a,team-b}", "scheduler.freeRoom.interval=1m",
				"deviceClasses.gpu.extendedResourceName=nvidia.com/gpu"},
			mock: true, leaderElect: true, replicas: 2, deviceClasses: true, policy: true, metrics: true, gpuExtendedResourceName: "nvidia.com/gpu",
			gpuNodeLabels: defaultGPUNodeLabels, lease: itest.ChartSchedulerName, freeRoomReaders: []string{"team-a", "team-b"},
			schedulerArgsWant: []string{"--topology-levels=topology.gpufabric.dev/rack,topology.gpufabric.dev/ib-leaf", "--domain-channels=4", "--metrics-address=:8080", "--profiling=true", "--free-room-interval=1m"},
		},
		{
			name: "custom", values: []string{custom}, privileged: true, replicas: 1,
			gpuNodeLabels: []string{"nvidia.com/gpu.present"}, lease: "x",
			schedulerArgsWant: []string{"--leader-elect=false", "--commit-record-namespace=$(POD_NAMESPACE)", "--metrics-address=",
				"--disable-preemption=true", "--nomination-timeout=90s", "--starvation-bound=0s", "--commits-in-flight=2", "--pack-order=fullest-nodes", "--free-room-interval=0s"},
		},
	}
	for _, p := range profiles {
		t.Run(p.name, func(t *testing.T) {
			r, err := itest.RenderChart(t.Context(), helm, root, p.values, p.sets)
			if err != nil {
				t.Fatal(err)
			}
			checkRBAC(t, r, p.lease)
			checkFreeRoomReaders(t, r, p.freeRoomReaders)
			checkPlugin(t, r, root, p)
			checkScheduler(t, r, root, p)
			checkClusterObjects(t, r, p)
		})
	}
}

// checkRBAC: each identity gets exactly the rules of its files/rbac file;
// the scheduler's Role renews only the configured Lease.
func checkRBAC(t *testing.T, r *itest.Rendered, lease string) {
	for _, c := range []struct{ name, file string }{{itest.ChartPluginName, pluginRulesFile}, {itest.ChartSchedulerName, framework.SchedulerRulesFile}, {itest.ChartGrouperName, grouperRulesFile}} {
		want, err := framework.LoadRules(c.file)
		if err != nil {
			t.Fatal(err)
		}
		role := get[*rbacv1.ClusterRole](t, r, "ClusterRole", c.name)
		if diff := cmp.Diff(want, role.Rules); diff != "" {
			t.Errorf("ClusterRole %s rules differ from %s (-want +got):\n%s", c.name, c.file, diff)
		}
		binding := get[*rbacv1.ClusterRoleBinding](t, r, "ClusterRoleBinding", c.name)
		wantSubjects := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: c.name, Namespace: itest.ChartNamespace}}
		if diff := cmp.Diff(wantSubjects, binding.Subjects); diff != "" || binding.RoleRef.Name != c.name {
			t.Errorf("ClusterRoleBinding %s: roleRef %s, subjects (-want +got):\n%s", c.name, binding.RoleRef.Name, diff)
		}
		get[*corev1.ServiceAccount](t, r, "ServiceAccount", c.name)
	}
	want, err := framework.LoadRules(framework.SchedulerNamespaceRulesFile)
	if err != nil {
		t.Fatal(err)
	}
	for i := range want {
		if slices.Equal(want[i].ResourceNames, []string{itest.ChartSchedulerName}) {
			want[i].ResourceNames = []string{lease}
		}
	}
	role := get[*rbacv1.Role](t, r, "Role", itest.ChartSchedulerName)
	if diff := cmp.Diff(want, role.Rules); diff != "" {
		t.Errorf("Role %s rules differ from %s (-want +got):\n%s", itest.ChartSchedulerName, framework.SchedulerNamespaceRulesFile, diff)
	}
	binding := get[*rbacv1.RoleBinding](t, r, "RoleBinding", itest.ChartSchedulerName)
	if binding.RoleRef.Kind != "Role" || binding.RoleRef.Name != itest.ChartSchedulerName || len(binding.Subjects) != 1 || binding.Subjects[0].Name != itest.ChartSchedulerName {
		t.Errorf("RoleBinding %s: %+v %+v", itest.ChartSchedulerName, binding.RoleRef, binding.Subjects)
	}
	want, err = framework.LoadRules(grouperNamespaceRulesFile)
	if err != nil {
		t.Fatal(err)
	}
	if role := get[*rbacv1.Role](t, r, "Role", itest.ChartGrouperName); !cmp.Equal(want, role.Rules) {
		t.Errorf("Role %s rules differ from %s: %s", itest.ChartGrouperName, grouperNamespaceRulesFile, cmp.Diff(want, role.Rules))
	}
}

// checkFreeRoomReaders: the free-room view's reader Role has exactly the
// rules of files/rbac/free-room-reader.yaml (get on that one ConfigMap)
// and is bound to the groups of scheduler.freeRoom.readerGroups; with no
// groups (or the view off) there is no such Role.
func checkFreeRoomReaders(t *testing.T, r *itest.Rendered, groups []string) {
	name := itest.ChartSchedulerName + "-free-room-reader"
	if groups == nil {
		for _, kind := range []string{"Role", "RoleBinding"} {
			if _, ok := r.Typed[kind+"/"+name]; ok {
				t.Errorf("%s %s rendered, want none", kind, name)
			}
		}
		return
	}
	want, err := framework.LoadRules(framework.FreeRoomReaderRulesFile)
	if err != nil {
		t.Fatal(err)
	}
	role := get[*rbacv1.Role](t, r, "Role", name)
	if diff := cmp.Diff(want, role.Rules); diff != "" || role.Namespace != itest.ChartNamespace {
		t.Errorf("Role %s/%s rules differ from %s (-want +got):\n%s", role.Namespace, name, framework.FreeRoomReaderRulesFile, diff)
	}
	var wantSubjects []rbacv1.Subject
	for _, g := range groups {
		wantSubjects = append(wantSubjects, rbacv1.Subject{APIGroup: rbacv1.GroupName, Kind: rbacv1.GroupKind, Name: g})
	}
	binding := get[*rbacv1.RoleBinding](t, r, "RoleBinding", name)
	if diff := cmp.Diff(wantSubjects, binding.Subjects); diff != "" || binding.RoleRef.Kind != "Role" || binding.RoleRef.Name != name {
		t.Errorf("RoleBinding %s: roleRef %+v, subjects (-want +got):\n%s", name, binding.RoleRef, diff)
	}
}

func checkPlugin(t *testing.T, r *itest.Rendered, root string, p chartProfile) {
	ds := get[*appsv1.DaemonSet](t, r, "DaemonSet", itest.ChartPluginName)
	spec := ds.Spec.Template.Spec
	ru := ds.Spec.UpdateStrategy.RollingUpdate
	if ds.Spec.UpdateStrategy.Type != appsv1.RollingUpdateDaemonSetStrategyType || ru == nil ||
		ru.MaxSurge.String() != "1" || ru.MaxUnavailable.String() != "0" {
		t.Errorf("update strategy: %+v, want RollingUpdate maxSurge 1 maxUnavailable 0", ds.Spec.UpdateStrategy)
	}
	if spec.ServiceAccountName != itest.ChartPluginName {
		t.Errorf("service account %q, want %q", spec.ServiceAccountName, itest.ChartPluginName)
	}
	if got := nodeAffinityKeys(spec.Affinity); !slices.Equal(got, p.gpuNodeLabels) {
		t.Errorf("node affinity keys %v, want %v", got, p.gpuNodeLabels)
	}
	if len(spec.Containers) != 1 {
		t.Fatalf("%d containers, want 1", len(spec.Containers))
	}
	c := spec.Containers[0]
	env := map[string]corev1.EnvVar{}
	for _, e := range c.Env {
		env[e.Name] = e
	}
	for name, path := range map[string]string{"NODE_NAME": "spec.nodeName", "POD_UID": "metadata.uid"} {
		if e := env[name]; e.ValueFrom == nil || e.ValueFrom.FieldRef == nil || e.ValueFrom.FieldRef.FieldPath != path {
			t.Errorf("env %s: %+v, want fieldRef %s", name, e, path)
		}
	}
	// Every variable is one the plugin reads (its flags' twins in flags.go,
	// and serving.go for the metrics port's).
	flagsGo := readFile(t, filepath.Join(root, "cmd/kubelet-plugin/flags.go")) + readFile(t, filepath.Join(root, "cmd/kubelet-plugin/serving.go"))
	for name := range env {
		if name != "LD_LIBRARY_PATH" && !strings.Contains(flagsGo, `"`+name+`"`) {
			t.Errorf("env %s is not read by cmd/kubelet-plugin/flags.go or serving.go", name)
		}
	}
	wantBackend := map[bool]string{true: "mock", false: "nvml"}[p.mock]
	if got := env["GPUFABRIC_BACKEND"].Value; got != wantBackend {
		t.Errorf("GPUFABRIC_BACKEND %q, want %q", got, wantBackend)
	}
	mounts := map[string]corev1.VolumeMount{}
	for _, m := range c.VolumeMounts {
		mounts[m.MountPath] = m
	}
	hostPaths := map[string]string{}
	for _, v := range spec.Volumes {
		if v.HostPath != nil {
			hostPaths[v.Name] = v.HostPath.Path
		}
	}
	// Host directories the kubelet and the runtime read: same path inside.
	for path, readOnly := range map[string]bool{
		"/var/lib/kubelet/plugins/gpufabric.dev": false, "/var/lib/kubelet/plugins_registry": false,
		"/var/run/cdi": false, "/var/lib/gpufabric": false, "/dev": true, "/sys": true,
	} {
		m, ok := mounts[path]
		if !ok || hostPaths[m.Name] != path || m.ReadOnly != readOnly {
			t.Errorf("mount %s: %+v (host path %q), want host path %s readOnly=%v", path, m, hostPaths[m.Name], path, readOnly)
		}
	}
	sc := c.SecurityContext
	if sc == nil || sc.Privileged == nil || *sc.Privileged != p.privileged {
		t.Errorf("securityContext %+v, want privileged=%v", sc, p.privileged)
	} else if !p.privileged && (sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"})) {
		t.Errorf("unprivileged plugin keeps capabilities: %+v", sc.Capabilities)
	}
	if p.mock {
		checkMockFabric(t, r, spec, env["GPUFABRIC_MOCK_FABRIC"].Value, mounts)
	}
}

// checkMockFabric: the fabric file reaches the plugin through a ConfigMap
// mounted where GPUFABRIC_MOCK_FABRIC points, and is a valid fabric.
func checkMockFabric(t *testing.T, r *itest.Rendered, spec corev1.PodSpec, path string, mounts map[string]corev1.VolumeMount) {
	m, ok := mounts[filepath.Dir(path)]
	if !ok {
		t.Fatalf("GPUFABRIC_MOCK_FABRIC=%q is not in a mounted volume", path)
	}
	i := slices.IndexFunc(spec.Volumes, func(v corev1.Volume) bool { return v.Name == m.Name })
	if i < 0 || spec.Volumes[i].ConfigMap == nil {
		t.Fatalf("volume %s is not a ConfigMap", m.Name)
	}
	cm := get[*corev1.ConfigMap](t, r, "ConfigMap", spec.Volumes[i].ConfigMap.Name)
	data, ok := cm.Data[filepath.Base(path)]
	if !ok {
		t.Fatalf("ConfigMap %s has no key %s", cm.Name, filepath.Base(path))
	}
	if _, err := mock.Parse("values-mock.yaml", []byte(data)); err != nil {
		t.Errorf("mock fabric: %v", err)
	}
}

func checkScheduler(t *testing.T, r *itest.Rendered, root string, p chartProfile) {
	d := get[*appsv1.Deployment](t, r, "Deployment", itest.ChartSchedulerName)
	spec := d.Spec.Template.Spec
	if d.Spec.Replicas == nil || *d.Spec.Replicas != p.replicas {
		t.Errorf("replicas %v, want %d", d.Spec.Replicas, p.replicas)
	}
	if spec.ServiceAccountName != itest.ChartSchedulerName {
		t.Errorf("service account %q, want %q", spec.ServiceAccountName, itest.ChartSchedulerName)
	}
	if spec.Affinity == nil || spec.Affinity.PodAntiAffinity == nil {
		t.Errorf("no pod anti-affinity")
	}
	args := spec.Containers[0].Args
	for _, want := range p.schedulerArgsWant {
		if !slices.Contains(args, want) {
			t.Errorf("scheduler args %q lack %q", args, want)
		}
	}
	// Every flag is one the scheduler defines.
	optionsGo := readFile(t, filepath.Join(root, "cmd/scheduler/options.go"))
	flagName := regexp.MustCompile(`^--?([a-z-]+)`)
	for _, a := range args {
		m := flagName.FindStringSubmatch(a)
		if m == nil || !strings.Contains(optionsGo, `"`+m[1]+`"`) {
			t.Errorf("scheduler arg %q is not a flag of cmd/scheduler/options.go", a)
		}
	}
}

// checkClusterObjects: DeviceClasses, the admission policy, metrics Services.
func checkClusterObjects(t *testing.T, r *itest.Rendered, p chartProfile) {
	classes := 0
	for _, typ := range []string{"gpu", "nic", "fabric-domain", "mig"} {
		key := "DeviceClass/" + typ + ".gpufabric.dev"
		if _, ok := r.Typed[key]; !ok {
			continue
		}
		classes++
		dc := get[*resourceapi.DeviceClass](t, r, "DeviceClass", typ+".gpufabric.dev")
		want := `device.driver == "gpufabric.dev" && device.attributes["gpufabric.dev"].type == "` + typ + `"`
		if len(dc.Spec.Selectors) != 1 || dc.Spec.Selectors[0].CEL == nil || dc.Spec.Selectors[0].CEL.Expression != want {
			t.Errorf("%s selectors %+v, want CEL %s", key, dc.Spec.Selectors, want)
		}
		wantName := map[bool]string{true: p.gpuExtendedResourceName}[typ == "gpu"]
		if got := ptr.Deref(dc.Spec.ExtendedResourceName, ""); got != wantName || (wantName == "" && dc.Spec.ExtendedResourceName != nil) {
			t.Errorf("%s extendedResourceName %v, want %q (nil when empty)", key, dc.Spec.ExtendedResourceName, wantName)
		}
	}
	if want := map[bool]int{true: 4, false: 0}[p.deviceClasses]; classes != want {
		t.Errorf("%d DeviceClasses, want %d", classes, want)
	}
	policyName := itest.ChartPluginName + "-resourceslices"
	_, hasPolicy := r.Typed["ValidatingAdmissionPolicy/"+policyName]
	_, hasBinding := r.Typed["ValidatingAdmissionPolicyBinding/"+policyName]
	if hasPolicy != p.policy || hasBinding != p.policy {
		t.Errorf("admission policy %v, binding %v, want %v", hasPolicy, hasBinding, p.policy)
	}
	if p.policy {
		vap := get[*admissionregistrationv1.ValidatingAdmissionPolicy](t, r, "ValidatingAdmissionPolicy", policyName)
		want := `request.userInfo.username == "` + pluginUser + `"`
		if len(vap.Spec.MatchConditions) != 1 || vap.Spec.MatchConditions[0].Expression != want {
			t.Errorf("policy match conditions %+v, want %s", vap.Spec.MatchConditions, want)
		}
	}
	checkSchedulerPolicies(t, r, p)
	// Prometheus's documented way in: a ClusterRole that may get /metrics.
	if _, ok := r.Typed["ClusterRole/gpufabric-metrics-reader"]; ok != p.metrics {
		t.Errorf("ClusterRole gpufabric-metrics-reader rendered %v, want %v", ok, p.metrics)
	} else if ok {
		reader := get[*rbacv1.ClusterRole](t, r, "ClusterRole", "gpufabric-metrics-reader")
		want := []rbacv1.PolicyRule{{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}}}
		if diff := cmp.Diff(want, reader.Rules); diff != "" {
			t.Errorf("metrics-reader rules (-want +got):\n%s", diff)
		}
	}
	for _, c := range []struct{ name, workload string }{{itest.ChartPluginName, "DaemonSet"}, {itest.ChartSchedulerName, "Deployment"}} {
		key := "Service/" + c.name + "-metrics"
		if _, ok := r.Typed[key]; ok != p.metrics {
			t.Errorf("%s rendered %v, want %v", key, ok, p.metrics)
			continue
		}
		if !p.metrics {
			continue
		}
		svc := get[*corev1.Service](t, r, "Service", c.name+"-metrics")
		tmpl := podTemplate(t, r, c.workload, c.name)
		for k, v := range svc.Spec.Selector {
			if tmpl.Labels[k] != v {
				t.Errorf("%s selector %s=%s does not match the pods' labels %v", key, k, v, tmpl.Labels)
			}
		}
		if !slices.ContainsFunc(tmpl.Spec.Containers[0].Ports, func(p corev1.ContainerPort) bool { return p.Name == "metrics" }) {
			t.Errorf("%s targets port metrics, which %s does not expose", key, c.name)
		}
	}
}

func podTemplate(t *testing.T, r *itest.Rendered, kind, name string) corev1.PodTemplateSpec {
	if kind == "DaemonSet" {
		return get[*appsv1.DaemonSet](t, r, kind, name).Spec.Template
	}
	return get[*appsv1.Deployment](t, r, kind, name).Spec.Template
}

func nodeAffinityKeys(a *corev1.Affinity) []string {
	if a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return nil
	}
	var keys []string
	for _, term := range a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
		for _, e := range term.MatchExpressions {
			keys = append(keys, e.Key)
		}
	}
	return keys
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// TestChartSchemaRejects: values that violate values.schema.json fail helm
// template, and the error names the offending value.
func TestChartSchemaRejects(t *testing.T) {
	helm, root := itest.HelmTool(t)
	cases := []struct {
		name   string
		values []string
		sets   []string
		want   string
	}{
		{name: "unknown backend", sets: []string{"kubeletPlugin.backend=cuda"}, want: "/kubeletPlugin/backend"},
		{name: "unknown value", sets: []string{"kubeletPlugin.replicas=2"}, want: "additional properties 'replicas' not allowed"},
		{name: "misspelled top-level value", sets: []string{"schedular.replicas=2"}, want: "additional properties 'schedular' not allowed"},
		{name: "no replicas", sets: []string{"scheduler.replicas=0"}, want: "/scheduler/replicas"},
		{name: "replicas not a number", sets: []string{"scheduler.replicas=two"}, want: "/scheduler/replicas"},
		{name: "two schedulers without leader election", sets: []string{"scheduler.leaderElection.enabled=false"}, want: "/scheduler/replicas"},
		{name: "port out of range", sets: []string{"scheduler.metrics.port=70000"}, want: "/scheduler/metrics/port"},
		{name: "bad anti-affinity", sets: []string{"scheduler.antiAffinity=always"}, want: "/scheduler/antiAffinity"},
		{name: "bad topology label key", sets: []string{"scheduler.topologyLevels[0]=not a label"}, want: "/scheduler/topologyLevels/0"},
		{name: "bad health interval", sets: []string{"kubeletPlugin.healthInterval=soon"}, want: "/kubeletPlugin/healthInterval"},
		{name: "relative state dir", sets: []string{"kubeletPlugin.stateDir=var/lib/x"}, want: "/kubeletPlugin/stateDir"},
		{name: "bad pull policy", sets: []string{"scheduler.image.pullPolicy=Sometimes"}, want: "/scheduler/image/pullPolicy"},
		{name: "bad toleration", sets: []string{"kubeletPlugin.tolerations[0].operator=Maybe"}, want: "/kubeletPlugin/tolerations/0/operator"},
		{name: "mock without fabric", values: []string{mockValuesFile}, sets: []string{"kubeletPlugin.mock.fabric="}, want: "/kubeletPlugin/mock/fabric"},
		{name: "bad starvation bound", sets: []string{"scheduler.preemption.starvationBound=30 minutes"}, want: "/scheduler/preemption/starvationBound"},
		{name: "no commits in flight", sets: []string{"scheduler.commitsInFlight=0"}, want: "/scheduler/commitsInFlight"},
		{name: "unknown pack order", sets: []string{"scheduler.packOrder=spread"}, want: "/scheduler/packOrder"},
		{name: "profiling without metrics", sets: []string{"scheduler.profiling=true", "scheduler.metrics.enabled=false"}, want: "/scheduler/metrics/enabled"},
		{name: "plugin profiling without metrics", sets: []string{"kubeletPlugin.profiling=true", "kubeletPlugin.metrics.enabled=false"}, want: "/kubeletPlugin/metrics/enabled"},
		{name: "TLS secret not a name", sets: []string{"scheduler.metrics.tlsSecret=Not_A_Name"}, want: "/scheduler/metrics/tlsSecret"},
		{name: "profiling not a switch", sets: []string{"scheduler.profiling=yes"}, want: "/scheduler/profiling"},
		{name: "preemption not a switch", sets: []string{"scheduler.preemption.enabled=sometimes"}, want: "/scheduler/preemption/enabled"},
		{name: "bad resource quantity", sets: []string{"scheduler.resources.limits.memory=lots"}, want: "/scheduler/resources/limits/memory"},
		{name: "extended resource name without a domain", sets: []string{"deviceClasses.gpu.extendedResourceName=gpu"}, want: "/deviceClasses/gpu/extendedResourceName"},
		{name: "extended resource name in kubernetes.io", sets: []string{"deviceClasses.gpu.extendedResourceName=kubernetes.io/gpu"}, want: "/deviceClasses/gpu/extendedResourceName"},
		{name: "extended resource name of a quota", sets: []string{"deviceClasses.gpu.extendedResourceName=requests.nvidia.com/gpu"}, want: "/deviceClasses/gpu/extendedResourceName"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := itest.RenderChart(t.Context(), helm, root, c.values, c.sets)
			if err == nil {
				t.Fatalf("helm template succeeded, want a schema error at %s", c.want)
			}
			if !strings.Contains(err.Error(), "values don't meet the specifications of the schema") || !strings.Contains(err.Error(), c.want) {
				t.Errorf("want a schema error mentioning %q, got:\n%v", c.want, err)
			}
		})
	}
}

// checkSchedulerPolicies: the scheduler's scope and protected-objects
// policies always, the fence with leader election, bound to its Lease.
func checkSchedulerPolicies(t *testing.T, r *itest.Rendered, p chartProfile) {
	for _, name := range []string{itest.ChartSchedulerName + "-scope", itest.ChartSchedulerName + "-protected", itest.ChartSchedulerName + "-fence"} {
		want := name != itest.ChartSchedulerName+"-fence" || p.leaderElect
		_, hasPolicy := r.Typed["ValidatingAdmissionPolicy/"+name]
		_, hasBinding := r.Typed["ValidatingAdmissionPolicyBinding/"+name]
		if hasPolicy != want || hasBinding != want {
			t.Errorf("policy %s rendered %v, binding %v, want %v", name, hasPolicy, hasBinding, want)
		}
	}
	if !p.leaderElect {
		return
	}
	b := get[*admissionregistrationv1.ValidatingAdmissionPolicyBinding](t, r, "ValidatingAdmissionPolicyBinding", itest.ChartSchedulerName+"-fence")
	if pr := b.Spec.ParamRef; pr == nil || pr.Name != p.lease || pr.Namespace != itest.ChartNamespace ||
		pr.ParameterNotFoundAction == nil || *pr.ParameterNotFoundAction != admissionregistrationv1.AllowAction {
		t.Errorf("fence binding paramRef %+v, want the Lease %s/%s, allowing without it (or nobody could write)", pr, itest.ChartNamespace, p.lease)
	}
}
