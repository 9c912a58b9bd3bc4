package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/gpufabric/gpufabric/pkg/topology"
	"github.com/gpufabric/gpufabric/pkg/workloads/grouping"
	"github.com/gpufabric/gpufabric/test/integration/framework"
	"github.com/gpufabric/gpufabric/test/integration/framework/controllers"
)

// The workloads the demo submits beside the Indexed Job when the JobSet
// and LeaderWorkerSet controllers are built (examples/workloads), and the
// groups gpufabric-grouper makes of them, with their pods.
var (
	workloadFiles  = []string{"jobset.yaml", "lws.yaml"}
	workloadGroups = map[string]int{"jobset.eval.workers": 2, "lws.chat.0": 2}
)

// grouperRulesFile holds the chart's rules of the grouper identity.
const grouperRulesFile = "deployments/helm/gpufabric/files/rbac/grouper.yaml"

// withWorkloads says whether the demo runs the workload controllers:
// --workload-controllers on, off, or auto (when
// hack/build-workload-controllers.sh has built them: its cache holds the
// JobSet and LeaderWorkerSet binaries, or GPUFABRIC_WORKLOAD_CONTROLLERS_BIN
// is set).
func (o options) withWorkloads() (bool, error) {
	switch o.controllers {
	case "on":
		return true, nil
	case "off":
		return false, nil
	case "auto", "":
	default:
		return false, fmt.Errorf("--workload-controllers: want on, off or auto, got %q", o.controllers)
	}
	if os.Getenv(controllers.BinDirEnv) != "" {
		return true, nil
	}
	root, err := framework.RepoRoot()
	if err != nil {
		return false, err
	}
	cache := os.Getenv("GPUFABRIC_BIN_CACHE")
	if cache == "" {
		cache = filepath.Join(root, ".cache", "bin")
	}
	dirs, _ := filepath.Glob(filepath.Join(cache, "jobset-*_lws-*_"+runtime.Version()))
	for _, d := range dirs {
		if isFile(filepath.Join(d, "jobset")) && isFile(filepath.Join(d, "lws")) {
			return true, nil
		}
	}
	return false, nil
}

func isFile(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular()
}

// startWorkloads starts the JobSet and LeaderWorkerSet controllers,
// gpufabric-grouper (the chart's rules) and the chart's pod-group policy.
func (d *demo) startWorkloads(ctx context.Context, out io.Writer) error {
	step(out, "Starting the JobSet and LeaderWorkerSet controllers, gpufabric-grouper and its pod-group policy")
	if err := controllers.Start(ctx, d.cp, controllers.JobSet, controllers.LWS); err != nil {
		return err
	}
	const name = "gpufabric-grouper-pod-groups"
	_, err := d.client.AdmissionregistrationV1().MutatingAdmissionPolicies().Create(ctx, &admissionregistrationv1.MutatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: grouping.PodGroupPolicy(grouping.ModeFlat)}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("create pod-group policy: %w", err)
	}
	_, err = d.client.AdmissionregistrationV1().MutatingAdmissionPolicyBindings().Create(ctx, &admissionregistrationv1.MutatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: admissionregistrationv1.MutatingAdmissionPolicyBindingSpec{PolicyName: name}}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("bind pod-group policy: %w", err)
	}
	bin, err := d.opts.binary("grouper")
	if err != nil {
		return err
	}
	kubeconfig, err := d.identity(ctx, "gpufabric-grouper", grouperRulesFile)
	if err != nil {
		return err
	}
	return d.cp.StartProcess("grouper", bin, "--kubeconfig="+kubeconfig, "--leader-elect=false", "--metrics-address=")
}

// applyWorkloads creates the workload examples. The pod-group policy may
// take a moment to load: the first pods of a workload created before it
// acts would name no group, so the demo waits until a dry-run pod is
// grouped.
func (d *demo) applyWorkloads(ctx context.Context) error {
	if err := d.waitPolicy(ctx); err != nil {
		return err
	}
	for _, f := range workloadFiles {
		if err := d.applyFile(ctx, filepath.Join(d.opts.workloads, f)); err != nil {
			return err
		}
	}
	return nil
}

// workloadsPending names the groups of the workload examples not made
// yet, or with fewer pods than they hold.
func (d *demo) workloadsPending(ctx context.Context) []string {
	var out []string
	pods, err := d.client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return []string{"(pods: " + err.Error() + ")"}
	}
	for g, n := range workloadGroups {
		if _, err := d.client.SchedulingV1beta1().PodGroups(ns).Get(ctx, g, metav1.GetOptions{}); err != nil {
			out = append(out, "group "+g+" (not made yet)")
			continue
		}
		members := 0
		for _, p := range pods.Items {
			if p.Spec.SchedulingGroup != nil && ptr.Deref(p.Spec.SchedulingGroup.PodGroupName, "") == g {
				members++
			}
		}
		if members < n {
			out = append(out, fmt.Sprintf("group %s (%d of %d pods)", g, members, n))
		}
	}
	return out
}

// waitPolicy waits until the pod-group policy names a dry-run pod's group.
func (d *demo) waitPolicy(ctx context.Context) error {
	probe := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "policy-probe", Namespace: ns, Labels: map[string]string{grouping.LabelSchedulerPluginsPodGroup: "probe"}},
		Spec:       corev1.PodSpec{SchedulerName: topology.SchedulerName, Containers: []corev1.Container{{Name: "c", Image: "registry.example/c:1"}}},
	}
	var last error
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		got, err := d.client.CoreV1().Pods(ns).Create(ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		last = err
		return err == nil && got.Spec.SchedulingGroup != nil, nil
	})
	if err != nil {
		return fmt.Errorf("the pod-group policy did not act in 30s (last: %v)", last)
	}
	return nil
}
