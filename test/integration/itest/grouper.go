package itest

import (
	"context"
	"fmt"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"

	"github.com/gpufabric/gpufabric/pkg/gang/membership"
	"github.com/gpufabric/gpufabric/pkg/gang/report"
	"github.com/gpufabric/gpufabric/pkg/topology"
	"github.com/gpufabric/gpufabric/pkg/workloads/grouper"
	"github.com/gpufabric/gpufabric/pkg/workloads/grouping"
	"github.com/gpufabric/gpufabric/test/integration/framework"
)

// Workload grouping in the tests: the chart's pod-group policy, the
// grouper with the chart's rules, and the scheduler's membership guard as
// cmd/scheduler wires it.

// GrouperRulesFile holds the RBAC rules the chart ships for the grouper.
const GrouperRulesFile = ChartDir + "/files/rbac/grouper.yaml"

// ApplyPodGroupPolicy creates the chart's pod-group policy of mode, bound
// to every namespace, and waits until it names a probe pod's group.
func ApplyPodGroupPolicy(t *testing.T, admin kubernetes.Interface, mode grouping.Mode) {
	t.Helper()
	ctx := t.Context()
	const name = "gpufabric-grouper-pod-groups"
	_, err := admin.AdmissionregistrationV1().MutatingAdmissionPolicies().Create(ctx, &admissionregistrationv1.MutatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: grouping.PodGroupPolicy(mode)}, metav1.CreateOptions{})
	Must(t, "create pod-group policy", err)
	_, err = admin.AdmissionregistrationV1().MutatingAdmissionPolicyBindings().Create(ctx, &admissionregistrationv1.MutatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: admissionregistrationv1.MutatingAdmissionPolicyBindingSpec{PolicyName: name},
	}, metav1.CreateOptions{})
	Must(t, "bind pod-group policy", err)
	probe := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "policy-probe", Namespace: "default", Labels: map[string]string{grouping.LabelSchedulerPluginsPodGroup: "probe"}},
		Spec:       corev1.PodSpec{SchedulerName: topology.SchedulerName, Containers: []corev1.Container{{Name: "c", Image: "registry.example/c:1"}}},
	}
	Poll(t, "pod-group policy acts", 30*time.Second, func(ctx context.Context) error {
		got, err := admin.CoreV1().Pods("default").Create(ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			return err
		}
		if got.Spec.SchedulingGroup == nil {
			return fmt.Errorf("probe pod not grouped yet")
		}
		return nil
	})
}

// StartGrouper runs the grouper in the test process as user
// gpufabric-grouper with exactly the chart's rules, until the test ends.
func StartGrouper(t *testing.T, cp *framework.ControlPlane, mode grouping.Mode) {
	t.Helper()
	ctx := t.Context()
	admin := cp.AdminClient(t)
	rules, err := framework.LoadRules(GrouperRulesFile)
	Must(t, "load grouper rules", err)
	Must(t, "grant grouper rules", framework.GrantRules(ctx, admin, grouper.Name, rules))
	rc, err := cp.UserConfig(grouper.Name)
	Must(t, "grouper config", err)
	cfg := grouper.Config{Mode: mode, JobControllerGrace: 2 * time.Second, DiscoveryInterval: 2 * time.Second}
	cfg.Client, err = kubernetes.NewForConfig(rc)
	Must(t, "grouper client", err)
	cfg.Dynamic, err = dynamic.NewForConfig(rc)
	Must(t, "grouper dynamic client", err)
	cfg.Metadata, err = metadata.NewForConfig(rc)
	Must(t, "grouper metadata client", err)
	cfg.Discovery, err = discovery.NewDiscoveryClientForConfig(rc)
	Must(t, "grouper discovery client", err)
	g, err := grouper.New(cfg)
	Must(t, "create grouper", err)
	RunUntilDone(t, "grouper", g.Run)
}

// MemberGuard is the scheduler's membership guard as cmd/scheduler wires
// it (--member-guard), with the scheduler's config rc; its informers run
// until the test ends and have synced.
func MemberGuard(t *testing.T, rc *rest.Config, client kubernetes.Interface) *membership.Guard {
	t.Helper()
	meta, err := metadata.NewForConfig(rc)
	Must(t, "scheduler metadata client", err)
	owners := membership.NewOwners(meta)
	owners.Run(t.Context())
	Must(t, "membership informers", owners.WaitForSync(t.Context()))
	broadcaster := events.NewBroadcaster(&events.EventSinkImpl{Interface: client.EventsV1()})
	broadcaster.StartRecordingToSink(t.Context().Done())
	t.Cleanup(broadcaster.Shutdown)
	return membership.New(owners, report.New(broadcaster.NewRecorder(scheme.Scheme, topology.SchedulerName)))
}

// RunUntilDone runs f in the test process until the test ends; an error
// before then fails the test.
func RunUntilDone(t *testing.T, name string, f func(context.Context) error) {
	t.Helper()
	logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.Verbosity(2)))
	ctx, cancel := context.WithCancel(klog.NewContext(t.Context(), logger))
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := f(ctx); err != nil && ctx.Err() == nil {
			t.Errorf("%s: %v", name, err)
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
}
