package grouping

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/gpufabric/gpufabric/pkg/topology"
	"github.com/gpufabric/gpufabric/pkg/workloads/grouping"
	"github.com/gpufabric/gpufabric/test/integration/framework"
	"github.com/gpufabric/gpufabric/test/integration/itest"
)

// TestPodGroupPolicy applies the generated MutatingAdmissionPolicies to a
// real kube-apiserver v1.37.1 (admissionregistration.k8s.io/v1, served
// without gates or runtime-config) and checks, pod by pod, that the group
// the apiserver sets is the one grouping.GroupOfPod names: the CEL and
// the Go never disagree. Pods of other schedulers, pods naming a group
// already and pods that opted out are left alone; in a labelled
// namespace a pod of the default scheduler becomes gpufabric's and is
// grouped.
func TestPodGroupPolicy(t *testing.T) {
	cp := framework.StartT(t, framework.Options{})
	ctx := t.Context()
	admin := cp.AdminClient(t)
	for _, mode := range []grouping.Mode{grouping.ModeFlat, grouping.ModeComposite} {
		t.Run(string(mode), func(t *testing.T) {
			ns := "policy-" + string(mode)
			applyPolicies(t, admin, mode, ns)
			for i, tc := range policyCases() {
				pod := policyPod(ns, fmt.Sprintf("p%d", i), tc)
				got, err := admin.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
				itest.Must(t, "create pod "+tc.name, err)
				want, _, ok := grouping.GroupOfPod(mode, tc.labels, tc.annotations)
				if tc.scheduler != "" && tc.scheduler != topology.SchedulerName || tc.group != "" {
					ok = false
				}
				name := ""
				if sg := got.Spec.SchedulingGroup; sg != nil {
					name = ptr.Deref(sg.PodGroupName, "")
				}
				switch {
				case tc.group != "" && name != tc.group:
					t.Errorf("%s: the pod's own group %q became %q", tc.name, tc.group, name)
				case tc.group == "" && ok && name != want:
					t.Errorf("%s: apiserver set group %q, Go names %q", tc.name, name, want)
				case tc.group == "" && !ok && name != "":
					t.Errorf("%s: apiserver set group %q, Go names none", tc.name, name)
				}
			}
		})
	}
	t.Run("namespace default", func(t *testing.T) {
		ns := "labelled"
		_, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: map[string]string{grouping.LabelNamespaceDefault: "true"}}}, metav1.CreateOptions{})
		itest.Must(t, "create namespace", err)
		itest.Must(t, "service account", framework.EnsureServiceAccount(ctx, admin, ns))
		pod := policyPod(ns, "w", policyCase{labels: map[string]string{grouping.LabelLWSName: "l", grouping.LabelLWSGroupIndex: "1"}, scheduler: corev1.DefaultSchedulerName})
		got, err := admin.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
		itest.Must(t, "create pod", err)
		if got.Spec.SchedulerName != topology.SchedulerName || got.Spec.SchedulingGroup == nil || ptr.Deref(got.Spec.SchedulingGroup.PodGroupName, "") != "lws.l.1" {
			t.Errorf("pod in a labelled namespace: scheduler %q, group %+v; want %s and lws.l.1", got.Spec.SchedulerName, got.Spec.SchedulingGroup, topology.SchedulerName)
		}
		other := policyPod(ns, "kube", policyCase{scheduler: "other-scheduler", labels: map[string]string{grouping.LabelRayCluster: "rc"}})
		got, err = admin.CoreV1().Pods(ns).Create(ctx, other, metav1.CreateOptions{})
		itest.Must(t, "create pod", err)
		if got.Spec.SchedulerName != "other-scheduler" || got.Spec.SchedulingGroup != nil {
			t.Errorf("another scheduler's pod changed: %q, %+v", got.Spec.SchedulerName, got.Spec.SchedulingGroup)
		}
	})
}

type policyCase struct {
	name        string
	labels      map[string]string
	annotations map[string]string
	scheduler   string // "": gpufabric-scheduler
	group       string // a group the pod names itself
}

func policyCases() []policyCase {
	long := strings.Repeat("a", 63)
	return []policyCase{
		{name: "jobset", labels: map[string]string{grouping.LabelJobSetName: "train", grouping.LabelReplicatedJobName: "workers", grouping.LabelJobName: "train-workers-0", grouping.LabelJobCompletionIndex: "1"}},
		{name: "jobset without replicated job", labels: map[string]string{grouping.LabelJobSetName: "train", grouping.LabelJobCompletionIndex: "0", grouping.LabelJobName: "j"}},
		{name: "lws", labels: map[string]string{grouping.LabelLWSName: "serve", grouping.LabelLWSGroupIndex: "3", grouping.LabelLWSWorkerIndex: "0"}},
		{name: "ray head", labels: map[string]string{grouping.LabelRayCluster: "rc", grouping.LabelRayGroup: grouping.RayHeadGroup, grouping.LabelRayNodeType: "head"}},
		{name: "ray worker", labels: map[string]string{grouping.LabelRayCluster: "rc", grouping.LabelRayGroup: "gpu-workers"}},
		{name: "indexed job", labels: map[string]string{grouping.LabelJobName: "llm.train", grouping.LabelJobCompletionIndex: "7"}},
		{name: "non-indexed job", labels: map[string]string{grouping.LabelJobName: "plain"}},
		{name: "scheduler-plugins", labels: map[string]string{grouping.LabelSchedulerPluginsPodGroup: "pt", grouping.LabelJobSetName: "x", grouping.LabelReplicatedJobName: "y"}},
		{name: "scheduler-plugins old", labels: map[string]string{grouping.LabelSchedulerPluginsPodGroupOld: "pt0"}},
		{name: "volcano", labels: map[string]string{grouping.LabelRayCluster: "rc"}, annotations: map[string]string{grouping.AnnotationVolcanoGroupName: "ray-rc-pg"}},
		{name: "uppercase", labels: map[string]string{grouping.LabelRayCluster: "Big"}},
		{name: "underscore", labels: map[string]string{grouping.LabelJobSetName: "a_b", grouping.LabelReplicatedJobName: "w"}},
		{name: "longest parts", labels: map[string]string{grouping.LabelJobSetName: long, grouping.LabelReplicatedJobName: long}},
		{name: "opted out", labels: map[string]string{grouping.LabelRayCluster: "rc"}, annotations: map[string]string{grouping.AnnotationGang: "false"}},
		{name: "other scheduler", labels: map[string]string{grouping.LabelRayCluster: "rc"}, scheduler: "default-scheduler"},
		{name: "own group kept", labels: map[string]string{grouping.LabelRayCluster: "rc"}, group: "mine"},
		{name: "plain", labels: map[string]string{"app": "x"}},
	}
}

func policyPod(ns, name string, tc policyCase) *corev1.Pod {
	scheduler := tc.scheduler
	if scheduler == "" {
		scheduler = topology.SchedulerName
	}
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: tc.labels, Annotations: tc.annotations},
		Spec: corev1.PodSpec{
			SchedulerName: scheduler,
			Containers:    []corev1.Container{{Name: "c", Image: "registry.example/c:1"}},
		},
	}
	if tc.group != "" {
		p.Spec.SchedulingGroup = &corev1.PodSchedulingGroup{PodGroupName: ptr.To(tc.group)}
	}
	return p
}

// applyPolicies creates the policy of mode bound to namespace ns (which
// it creates; the flat one also to namespace "labelled") and waits until
// it acts.
func applyPolicies(t *testing.T, admin kubernetes.Interface, mode grouping.Mode, ns string) {
	t.Helper()
	ctx := t.Context()
	_, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	itest.Must(t, "create namespace", err)
	itest.Must(t, "service account", framework.EnsureServiceAccount(ctx, admin, ns))
	groups := "pod-groups-" + string(mode)
	// The flat policy also groups the pods of the labelled namespace.
	namespaces := []string{ns}
	if mode == grouping.ModeFlat {
		namespaces = append(namespaces, "labelled")
	}
	createPolicy(t, admin, groups, grouping.PodGroupPolicy(mode), &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
		{Key: "kubernetes.io/metadata.name", Operator: metav1.LabelSelectorOpIn, Values: namespaces}}})
	probe := policyPod(ns, "probe", policyCase{labels: map[string]string{grouping.LabelLWSName: "probe", grouping.LabelLWSGroupIndex: "0"}})
	itest.Poll(t, "policy "+groups+" acts", 30*time.Second, func(ctx context.Context) error {
		got, err := admin.CoreV1().Pods(ns).Create(ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			return err
		}
		if got.Spec.SchedulingGroup == nil {
			return fmt.Errorf("probe pod not grouped yet")
		}
		return nil
	})
}

func createPolicy(t *testing.T, admin kubernetes.Interface, name string, spec admissionregistrationv1.MutatingAdmissionPolicySpec, namespaces *metav1.LabelSelector) {
	t.Helper()
	ctx := t.Context()
	_, err := admin.AdmissionregistrationV1().MutatingAdmissionPolicies().Create(ctx, &admissionregistrationv1.MutatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: spec}, metav1.CreateOptions{})
	itest.Must(t, "create policy "+name, err)
	_, err = admin.AdmissionregistrationV1().MutatingAdmissionPolicyBindings().Create(ctx, &admissionregistrationv1.MutatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.MutatingAdmissionPolicyBindingSpec{
			PolicyName:     name,
			MatchResources: &admissionregistrationv1.MatchResources{NamespaceSelector: namespaces},
		},
	}, metav1.CreateOptions{})
	itest.Must(t, "bind policy "+name, err)
}
