package workloads

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	"github.com/gpufabric/gpufabric/pkg/gang/scheduler"
	"github.com/gpufabric/gpufabric/pkg/gang/vocab"
	"github.com/gpufabric/gpufabric/pkg/inspect"
	"github.com/gpufabric/gpufabric/pkg/topology"
	"github.com/gpufabric/gpufabric/pkg/workloads/grouping"
	"github.com/gpufabric/gpufabric/test/integration/framework"
	"github.com/gpufabric/gpufabric/test/integration/framework/controllers"
	"github.com/gpufabric/gpufabric/test/integration/itest"
)

// smokeCase is one controller's smoke test: a workload whose pod templates
// name gpufabric-scheduler and a GPU claim, and what the controller must
// make of it.
type smokeCase struct {
	name string // subtest and namespace
	// create creates the workload in ns.
	create func(t *testing.T, dyn dynamic.Interface, ns string)
	// pods is how many pods the controller creates.
	pods int
	// groups are the PodGroups gpufabric-grouper makes of the workload,
	// with the pods each holds, and owner the kind that controls them.
	groups map[string]int
	owner  string
	// explain is the workload as `kubectl gpufabric explain` takes it.
	explain string
	// labels and annotations are the keys every pod carries (with the
	// controllers' value when not "").
	labels, annotations map[string]string
	// ranks maps each pod to its place in the workload (its indices,
	// joined); want is the sorted places of all pods.
	ranks func(p *corev1.Pod) string
	want  []string
	// check, when set, checks what else ties the pods together.
	check func(t *testing.T, admin kubernetes.Interface, dyn dynamic.Interface, ns string, pods []corev1.Pod)
}

// TestWorkloadControllers: one control plane (kube-controller-manager,
// kwok nodes: two NVLink domains × 4 nodes × 4 GPUs), the four controllers,
// the chart's pod-group policy, gpufabric-grouper and gpufabric-scheduler
// with its membership guard (both in the test process, the shipped RBAC
// rules); the four smoke cases in parallel, each submitted with nothing
// but schedulerName gpufabric-scheduler and placed as gangs.
func TestWorkloadControllers(t *testing.T) {
	cp := framework.StartT(t, framework.Options{ControllerManager: true, Kwok: true})
	admin := cp.AdminClient(t)
	// The controllers start (CRDs, processes, webhooks) while kwok readies
	// the nodes.
	_, ctx := ktesting.NewTestContext(t)
	started := make(chan error, 1)
	go func() {
		started <- controllers.Start(ctx, cp, controllers.JobSet, controllers.LWS, controllers.Trainer, controllers.KubeRay)
	}()
	itest.KwokFabric(t, admin, []string{"a", "b"}, 4, 4)
	itest.Must(t, "start workload controllers", <-started)
	dyn, err := dynamic.NewForConfig(cp.AdminConfig())
	itest.Must(t, "dynamic client", err)
	itest.ApplyPodGroupPolicy(t, admin, grouping.ModeFlat)
	itest.StartGrouper(t, cp, grouping.ModeFlat)
	startScheduler(t, cp, false)
	for _, tc := range []smokeCase{jobSetCase(), lwsCase(), trainerCase(), kubeRayCase()} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			runSmoke(t, admin, dyn, tc)
		})
	}
}

// runSmoke creates the case's workload in a namespace of its own and
// checks its pods: all created, each with the keys and one of the places
// of the case, each naming the group the pod rules give it, every group
// made by gpufabric-grouper (owned by the workload) and placed as a gang
// in one NVLink domain, and no pod placed alone.
func runSmoke(t *testing.T, admin kubernetes.Interface, dyn dynamic.Interface, tc smokeCase) {
	ns := tc.name
	itest.GangNamespace(t, admin, ns, 1)
	tc.create(t, dyn, ns)
	pods := waitPlaced(t, admin, ns, tc.pods, slices.Collect(maps.Keys(tc.groups)))
	var ranks []string
	for i := range pods {
		p := &pods[i]
		t.Logf("pod %s on %s\n  labels: %v\n  annotations: %v", p.Name, p.Spec.NodeName, p.Labels, p.Annotations)
		checkTemplate(t, p)
		checkKeys(t, p, "label", p.Labels, tc.labels)
		checkKeys(t, p, "annotation", p.Annotations, tc.annotations)
		ranks = append(ranks, tc.ranks(p))
	}
	sort.Strings(ranks)
	if !slices.Equal(ranks, tc.want) {
		t.Errorf("the pods' places %q, want %q", ranks, tc.want)
	}
	if tc.check != nil {
		tc.check(t, admin, dyn, ns, pods)
	}
	checkPlacedAsGangs(t, admin, ns, pods, tc)
	checkExplain(t, admin, ns, tc)
}

// waitPlaced waits until ns has n pods, all bound, and each of groups
// has its PodGroupInitiallyScheduled condition (the commit binds the pods
// before it writes the condition), and returns the pods.
func waitPlaced(t *testing.T, admin kubernetes.Interface, ns string, n int, groups []string) []corev1.Pod {
	t.Helper()
	var pods []corev1.Pod
	itest.Poll(t, fmt.Sprintf("%d pods placed, their groups' conditions written", n), 90*time.Second, func(ctx context.Context) error {
		list, err := admin.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		pods = list.Items
		var unbound []string
		for _, p := range pods {
			if p.Spec.NodeName == "" {
				unbound = append(unbound, p.Name)
			}
		}
		if len(pods) != n || len(unbound) > 0 {
			return fmt.Errorf("%d pods of %d, unbound %v", len(pods), n, unbound)
		}
		for _, name := range groups {
			pg, err := admin.SchedulingV1beta1().PodGroups(ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if c := meta.FindStatusCondition(pg.Status.Conditions, vocab.ConditionInitiallyScheduled); c == nil {
				return fmt.Errorf("group %s: no %s condition yet", name, vocab.ConditionInitiallyScheduled)
			}
		}
		return nil
	})
	return pods
}

// checkExplain: `kubectl gpufabric explain KIND/NAME` finds the case's
// groups by the workload's name, each placed.
func checkExplain(t *testing.T, admin kubernetes.Interface, ns string, tc smokeCase) {
	t.Helper()
	cl, err := inspect.Load(t.Context(), admin, inspect.Need{Namespace: ns, Fabric: true, Claims: true, Pods: true, PodGroups: true})
	itest.Must(t, "load cluster", err)
	res, err := inspect.ResolveRef(cl, ns, tc.explain)
	itest.Must(t, "explain "+tc.explain, err)
	if want := slices.Sorted(maps.Keys(tc.groups)); !slices.Equal(res.Groups, want) || res.Workload != tc.explain {
		t.Errorf("explain %s: groups %v via %q; want %v", tc.explain, res.Groups, res.Workload, want)
	}
	for _, g := range res.Groups {
		rep, err := inspect.BuildExplain(cl, inspect.Options{}, ns, g, 0)
		itest.Must(t, "build explain", err)
		if rep.State != inspect.StatePlaced {
			t.Errorf("explain %s: group %s is %s: %s", tc.explain, g, rep.State, rep.Summary)
		}
	}
}

// checkTemplate: the controller kept what the pod template asked of the
// scheduler, and the pod names the group the pod rules give its labels
// (the chart's admission policy set it).
func checkTemplate(t *testing.T, p *corev1.Pod) {
	t.Helper()
	if p.Spec.SchedulerName != topology.SchedulerName {
		t.Errorf("pod %s: schedulerName %q, want %q", p.Name, p.Spec.SchedulerName, topology.SchedulerName)
	}
	if !slices.ContainsFunc(p.Spec.ResourceClaims, func(c corev1.PodResourceClaim) bool {
		return ptr.Deref(c.ResourceClaimTemplateName, "") == itest.GPUTemplate
	}) {
		t.Errorf("pod %s: no claim from template %s in %v", p.Name, itest.GPUTemplate, p.Spec.ResourceClaims)
	}
	want, _, ok := grouping.GroupOfPod(grouping.ModeFlat, p.Labels, p.Annotations)
	if sg := p.Spec.SchedulingGroup; !ok || sg == nil || ptr.Deref(sg.PodGroupName, "") != want {
		t.Errorf("pod %s names group %v; want %q", p.Name, sg, want)
	}
}

// checkKeys: every wanted key is in m, with the wanted value when one is
// given ("": any non-empty value).
func checkKeys(t *testing.T, p *corev1.Pod, what string, m, want map[string]string) {
	t.Helper()
	for _, k := range slices.Sorted(maps.Keys(want)) {
		got, ok := m[k]
		switch {
		case !ok || got == "":
			t.Errorf("pod %s has no %s %s", p.Name, what, k)
		case want[k] != "" && got != want[k]:
			t.Errorf("pod %s: %s %s=%q, want %q", p.Name, what, k, got, want[k])
		}
	}
}

// checkPlacedAsGangs: each of the case's groups exists, made by
// gpufabric-grouper and controlled by the workload (the owner kind), was
// placed (PodGroupInitiallyScheduled), holds its pods, all in one NVLink
// domain; no pod got a PlacedWithoutGang or NotGroupMember warning; every
// pod's GPU claim is allocated.
func checkPlacedAsGangs(t *testing.T, admin kubernetes.Interface, ns string, pods []corev1.Pod, tc smokeCase) {
	t.Helper()
	members := map[string][]corev1.Pod{}
	for _, p := range pods {
		if sg := p.Spec.SchedulingGroup; sg != nil {
			members[ptr.Deref(sg.PodGroupName, "")] = append(members[ptr.Deref(sg.PodGroupName, "")], p)
		}
	}
	for name, n := range tc.groups {
		pg, err := admin.SchedulingV1beta1().PodGroups(ns).Get(t.Context(), name, metav1.GetOptions{})
		if err != nil {
			t.Errorf("group %s: %v", name, err)
			continue
		}
		c := meta.FindStatusCondition(pg.Status.Conditions, vocab.ConditionInitiallyScheduled)
		owner := metav1.GetControllerOf(pg)
		switch {
		case pg.Labels[vocab.LabelManagedBy] != vocab.ManagedByGrouper || owner == nil || owner.Kind != tc.owner:
			t.Errorf("group %s: labels %v, controller %v; want gpufabric-grouper's, controlled by a %s", name, pg.Labels, owner, tc.owner)
		case c == nil || c.Status != metav1.ConditionTrue:
			t.Errorf("group %s not placed: %+v", name, c)
		case pg.Spec.SchedulingPolicy.Gang == nil || pg.Spec.SchedulingPolicy.Gang.MinCount != int32(n):
			t.Errorf("group %s: policy %+v, want a gang of %d", name, pg.Spec.SchedulingPolicy, n)
		}
		domains := map[string]bool{}
		for _, p := range members[name] {
			domains[itest.DomainOf(p.Spec.NodeName)] = true
		}
		if len(members[name]) != n || len(domains) != 1 {
			t.Errorf("group %s: %d members in domains %v; want %d in one", name, len(members[name]), domains, n)
		}
	}
	if len(members) != len(tc.groups) {
		t.Errorf("pods name groups %v; want %v", slices.Sorted(maps.Keys(members)), slices.Sorted(maps.Keys(tc.groups)))
	}
	evs, err := admin.EventsV1().Events(ns).List(t.Context(), metav1.ListOptions{})
	itest.Must(t, "list events", err)
	for _, e := range evs.Items {
		if e.Reason == vocab.EventPlacedWithoutGang || e.Reason == vocab.EventNotGroupMember {
			t.Errorf("%s on %s: %s", e.Reason, e.Regarding.Name, e.Note)
		}
	}
	claims, err := admin.ResourceV1().ResourceClaims(ns).List(t.Context(), metav1.ListOptions{})
	itest.Must(t, "list claims", err)
	allocated := 0
	for _, c := range claims.Items {
		if c.Status.Allocation != nil {
			allocated++
		}
	}
	if allocated != len(pods) || len(claims.Items) != len(pods) {
		t.Errorf("%d claims, %d allocated; want one allocated GPU claim per pod (%d)", len(claims.Items), allocated, len(pods))
	}
}

// podTemplate is the pod template of every workload: gpufabric-scheduler,
// one GPU from the namespace's gpus claim template, a container named
// container (some controllers look for theirs by name).
func podTemplate(container string, restart corev1.RestartPolicy) map[string]any {
	tpl := corev1.PodTemplateSpec{Spec: corev1.PodSpec{
		SchedulerName: topology.SchedulerName,
		RestartPolicy: restart,
		// kube-controller-manager taints nodes it hears nothing from; the
		// pods do not care.
		Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
		Containers: []corev1.Container{{
			Name: container, Image: "registry.example/" + container + ":1",
			Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: itest.GPUTemplate}}},
		}},
		ResourceClaims: []corev1.PodResourceClaim{{Name: itest.GPUTemplate, ResourceClaimTemplateName: ptr.To(itest.GPUTemplate)}},
	}}
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&tpl)
	if err != nil {
		panic(err) // a typed pod template always converts
	}
	return u
}

// create creates a custom resource of gvr from its content.
func create(t *testing.T, dyn dynamic.Interface, gvr schema.GroupVersionResource, ns string, obj map[string]any) {
	t.Helper()
	u := &unstructured.Unstructured{Object: obj}
	var err error
	if ns == "" {
		_, err = dyn.Resource(gvr).Create(t.Context(), u, metav1.CreateOptions{})
	} else {
		_, err = dyn.Resource(gvr).Namespace(ns).Create(t.Context(), u, metav1.CreateOptions{})
	}
	itest.Must(t, "create "+u.GetKind(), err)
}

// startScheduler runs gpufabric-scheduler in the test process with a
// client holding exactly the shipped RBAC rules, as the scheduler tests do;
// composite: it places CompositePodGroup trees (--composite-pod-groups).
func startScheduler(t *testing.T, cp *framework.ControlPlane, composite bool) {
	t.Helper()
	const user = "gpufabric-scheduler"
	itest.Must(t, "grant scheduler rules", framework.GrantSchedulerRules(t.Context(), cp.AdminClient(t), user, itest.RecordNamespace))
	cfg, err := cp.UserConfig(user)
	itest.Must(t, "user config", err)
	client, err := kubernetes.NewForConfig(cfg)
	itest.Must(t, "scheduler client", err)
	s, err := scheduler.New(scheduler.Config{
		Client: client, RecordNamespace: itest.RecordNamespace,
		InitialBackoff: 200 * time.Millisecond, MaxBackoff: 2 * time.Second,
		Members:            itest.MemberGuard(t, cfg, client), // --member-guard
		CompositePodGroups: composite,
	})
	itest.Must(t, "create scheduler", err)
	logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.Verbosity(2)))
	ctx, cancel := context.WithCancel(klog.NewContext(t.Context(), logger))
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := s.Run(ctx); err != nil && ctx.Err() == nil {
			t.Errorf("scheduler: %v", err)
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
}
