package scheduler

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2/ktesting"

	"github.com/gpufabric/gpufabric/pkg/gang/scheduler"
	"github.com/gpufabric/gpufabric/pkg/topology"
	"github.com/gpufabric/gpufabric/test/integration/framework"
	"github.com/gpufabric/gpufabric/test/integration/itest"
)

// Kueue quota resources the DeviceClasses of gpufabric map to
// (resources.deviceClassMappings), and the test's queues.
const (
	kueueGPU          = "gpufabric.dev/gpu"
	kueueChannel      = "gpufabric.dev/fabric-channel"
	kueueClusterQueue = "gpus"
	kueueLocalQueue   = "team"
	kueueGPUQuota     = 16
)

// TestKueueQuota: the real Kueue controller manager (hack/build-kueue.sh)
// in front of gpufabric, for Indexed Jobs with spec.scheduling (a gang of 4
// in one NVLink domain, as in TestSchedulerIndexedJob). Kueue's webhook
// suspends each Job (and keeps spec.scheduling); admitted, Kueue
// unsuspends it and the Job controller creates the PodGroup and pods. A
// Job over quota stays suspended; it finishes when its pods succeed.
func TestKueueQuota(t *testing.T) {
	runKueueQuota(t, kueueSubmitter{
		frameworks: []string{"batch/job"},
		submit:     func(t *testing.T, c kubernetes.Interface, ns string) { submitKueueJob(t, c, ns, "train") },
		held:       checkJobsSuspended,
		finish: func(t *testing.T, c kubernetes.Interface, ns string) {
			succeedPods(t, c, ns)
			waitJobComplete(t, c, ns)
		},
	})
}

// TestKueuePodGroupGates: Kueue's pod integration in front of gpufabric,
// for a PodGroup (gang of 4 in one NVLink domain) whose pods carry Kueue's
// pod-group label: Kueue's webhook puts its scheduling gate on each pod;
// admitted, Kueue removes the gates. gpufabric never places a gated pod:
// a group over quota keeps its gates and nothing is allocated for it.
func TestKueuePodGroupGates(t *testing.T) {
	runKueueQuota(t, kueueSubmitter{
		frameworks: []string{"pod"},
		submit:     func(t *testing.T, c kubernetes.Interface, ns string) { submitKueuePodGroup(t, c, ns, "train", 4) },
		held:       checkPodsGated,
		finish:     succeedPods,
	})
}

// kueueSubmitter is one way of submitting 4 pods × 4 GPUs to Kueue.
type kueueSubmitter struct {
	frameworks []string                                              // Kueue integrations it needs
	submit     func(t *testing.T, c kubernetes.Interface, ns string) // in the namespace's LocalQueue
	held       func(t *testing.T, c kubernetes.Interface, ns string) // checks its form while Kueue holds it
	finish     func(t *testing.T, c kubernetes.Interface, ns string) // ends it as the kubelet would
}

// runKueueQuota: a ClusterQueue holds 16 GPUs of the gpufabric.dev
// DeviceClass (Kueue's DRA quota counts the devices of each pod's claim
// templates); two teams submit 4 pods × 4 GPUs each through their
// LocalQueues, on a cluster of two domains of 16 GPUs. Team A's fits the
// quota, is admitted, and gpufabric places it in one domain. Team B's would
// fit the cluster (the other domain is free) but not the quota: Kueue
// holds it and gpufabric allocates nothing for it. When A's pods finish,
// Kueue admits B's and gpufabric places them.
func runKueueQuota(t *testing.T, sub kueueSubmitter) {
	admin, dyn := startKueueCluster(t, sub.frameworks, "team-a", "team-b")
	const nsA, nsB = "team-a", "team-b"

	sub.submit(t, admin, nsA)
	wlA := waitKueueWorkload(t, dyn, nsA, "Admitted", metav1.ConditionTrue)
	if got := kueueUsage(wlA, kueueGPU); got != fmt.Sprint(kueueGPUQuota) {
		t.Errorf("team A charged %q %s, want %d (4 pods × 4 GPUs)", got, kueueGPU, kueueGPUQuota)
	}
	stA := waitGangBound(t, admin, nsA, 4)
	checkPlacedGang(t, admin, stA, stA.Groups[0].Name, 4)

	// Team B: the other domain is free, the quota is not.
	sub.submit(t, admin, nsB)
	wlB := waitKueueWorkload(t, dyn, nsB, "QuotaReserved", metav1.ConditionFalse)
	if msg := kueueConditionMessage(wlB, "QuotaReserved"); !strings.Contains(msg, "insufficient unused quota for "+kueueGPU) {
		t.Errorf("team B pending with %q, want insufficient quota for %s", msg, kueueGPU)
	} else {
		t.Logf("team B pending: %s", msg)
	}
	time.Sleep(3 * time.Second) // Kueue, kube-controller-manager and gpufabric had their chances
	sub.held(t, admin, nsB)
	checkNothingAllocated(t, admin, nsB)

	// A finishes: Kueue releases its quota and admits B.
	sub.finish(t, admin, nsA)
	waitKueueWorkload(t, dyn, nsA, "Finished", metav1.ConditionTrue)
	wlB = waitKueueWorkload(t, dyn, nsB, "Admitted", metav1.ConditionTrue)
	if got := kueueUsage(wlB, kueueGPU); got != fmt.Sprint(kueueGPUQuota) {
		t.Errorf("team B charged %q %s, want %d", got, kueueGPU, kueueGPUQuota)
	}
	stB := waitGangBound(t, admin, nsB, 4)
	checkPlacedGang(t, admin, stB, stB.Groups[0].Name, 4)
}

// startKueueCluster starts a control plane with kube-controller-manager,
// two NVLink domains of 4 nodes × 4 GPUs, Kueue with the frameworks and
// gpufabric's DeviceClasses mapped to quota resources, the queues, a gang
// namespace per team, and gpufabric-scheduler.
func startKueueCluster(t *testing.T, frameworks []string, namespaces ...string) (kubernetes.Interface, dynamic.Interface) {
	t.Helper()
	cp := framework.StartT(t, framework.Options{ControllerManager: true})
	admin := cp.AdminClient(t)
	itest.FabricCluster(t, admin, []string{"a", "b"}, 4, 4)
	_, ctx := ktesting.NewTestContext(t)
	itest.Must(t, "start kueue", cp.StartKueue(ctx, framework.KueueOptions{
		Frameworks: frameworks,
		DeviceClassMappings: map[string][]string{
			kueueGPU:     {topology.GPUDeviceClass},
			kueueChannel: {topology.FabricDomainDeviceClass},
		},
	}))
	dyn, err := dynamic.NewForConfig(cp.AdminConfig())
	itest.Must(t, "dynamic client", err)
	for _, ns := range namespaces {
		itest.GangNamespace(t, admin, ns, 4)
	}
	createKueueQueues(t, dyn, namespaces...)
	startScheduler(t, schedulerClient(t, cp, "gpufabric-scheduler"), scheduler.Config{DomainChannels: 4})
	return admin, dyn
}

// createKueueQueues creates a ResourceFlavor, a ClusterQueue holding
// kueueGPUQuota GPUs (and fabric channels enough not to matter), and a
// LocalQueue into it in each namespace.
func createKueueQueues(t *testing.T, dyn dynamic.Interface, namespaces ...string) {
	t.Helper()
	ctx := t.Context()
	flavor := kueueObject("ResourceFlavor", "", "default", map[string]any{})
	_, err := dyn.Resource(framework.KueueResource("resourceflavors")).Create(ctx, flavor, metav1.CreateOptions{})
	itest.Must(t, "create resource flavor", err)
	cq := kueueObject("ClusterQueue", "", kueueClusterQueue, map[string]any{
		"namespaceSelector": map[string]any{},
		"resourceGroups": []any{map[string]any{
			"coveredResources": []any{kueueGPU, kueueChannel},
			"flavors": []any{map[string]any{
				"name": "default",
				"resources": []any{
					map[string]any{"name": kueueGPU, "nominalQuota": fmt.Sprint(kueueGPUQuota)},
					map[string]any{"name": kueueChannel, "nominalQuota": "64"},
				},
			}},
		}},
	})
	_, err = dyn.Resource(framework.KueueResource("clusterqueues")).Create(ctx, cq, metav1.CreateOptions{})
	itest.Must(t, "create cluster queue", err)
	for _, ns := range namespaces {
		lq := kueueObject("LocalQueue", ns, kueueLocalQueue, map[string]any{"clusterQueue": kueueClusterQueue})
		_, err := dyn.Resource(framework.KueueResource("localqueues")).Namespace(ns).Create(ctx, lq, metav1.CreateOptions{})
		itest.Must(t, "create local queue", err)
	}
	itest.Poll(t, "cluster queue active", 30*time.Second, func(ctx context.Context) error {
		u, err := dyn.Resource(framework.KueueResource("clusterqueues")).Get(ctx, kueueClusterQueue, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if s, msg := kueueCondition(u, "Active"); s != string(metav1.ConditionTrue) {
			return fmt.Errorf("Active=%s: %s", s, msg)
		}
		return nil
	})
}

func kueueObject(kind, ns, name string, spec map[string]any) *unstructured.Unstructured {
	gvr := framework.KueueResource("")
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": gvr.Group + "/" + gvr.Version,
		"kind":       kind,
		"metadata":   map[string]any{"name": name},
		"spec":       spec,
	}}
	if ns != "" {
		u.SetNamespace(ns)
	}
	return u
}

// submitKueueJob creates the Indexed Job of TestSchedulerIndexedJob (a
// gang of 4 in one NVLink domain) in the team's LocalQueue, not suspended:
// Kueue's mutating webhook suspends it.
func submitKueueJob(t *testing.T, c kubernetes.Interface, ns, name string) {
	t.Helper()
	job := indexedJob(ns, name, 4)
	job.Labels = map[string]string{framework.KueueQueueLabel: kueueLocalQueue}
	created, err := c.BatchV1().Jobs(ns).Create(t.Context(), job, metav1.CreateOptions{})
	itest.Must(t, "create job", err)
	if created.Spec.Suspend == nil || !*created.Spec.Suspend {
		t.Fatalf("job %s/%s created unsuspended: Kueue's webhook did not run", ns, name)
	}
	if created.Spec.Scheduling == nil || created.Spec.Scheduling.SchedulingPolicy == nil || created.Spec.Scheduling.SchedulingPolicy.Gang == nil {
		t.Fatalf("job %s/%s lost spec.scheduling through Kueue's webhook: %+v", ns, name, created.Spec.Scheduling)
	}
}

// waitKueueWorkload waits until the namespace's one Kueue Workload has the
// condition with status, and returns it.
func waitKueueWorkload(t *testing.T, dyn dynamic.Interface, ns, cond string, status metav1.ConditionStatus) *unstructured.Unstructured {
	t.Helper()
	var wl *unstructured.Unstructured
	itest.Poll(t, fmt.Sprintf("kueue workload in %s %s=%s", ns, cond, status), 60*time.Second, func(ctx context.Context) error {
		list, err := dyn.Resource(framework.KueueResource("workloads")).Namespace(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		if len(list.Items) != 1 {
			return fmt.Errorf("%d workloads", len(list.Items))
		}
		wl = &list.Items[0]
		if s, msg := kueueCondition(wl, cond); s != string(status) {
			return fmt.Errorf("%s=%q (%s)", cond, s, msg)
		}
		return nil
	})
	return wl
}

// kueueCondition returns status and message of a condition of a Kueue
// object ("" when absent).
func kueueCondition(u *unstructured.Unstructured, typ string) (string, string) {
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if m["type"] == typ {
			s, _ := m["status"].(string)
			msg, _ := m["message"].(string)
			return s, msg
		}
	}
	return "", ""
}

func kueueConditionMessage(u *unstructured.Unstructured, typ string) string {
	_, msg := kueueCondition(u, typ)
	return msg
}

// kueueUsage is the quantity of resource the workload's admission charged
// to its pod sets (one pod set here).
func kueueUsage(u *unstructured.Unstructured, resource string) string {
	sets, _, _ := unstructured.NestedSlice(u.Object, "status", "admission", "podSetAssignments")
	if len(sets) != 1 {
		return fmt.Sprintf("%d pod sets", len(sets))
	}
	m, _ := sets[0].(map[string]any)
	q, _, _ := unstructured.NestedString(m, "resourceUsage", resource)
	return q
}

// waitGangBound waits until the namespace's gang (its one PodGroup and n
// pods) is bound without commit records.
func waitGangBound(t *testing.T, c kubernetes.Interface, ns string, n int) *itest.GangState {
	t.Helper()
	var st *itest.GangState
	itest.Poll(t, "the gang placed in "+ns, 60*time.Second, func(ctx context.Context) error {
		var err error
		if st, err = itest.ReadGang(ctx, c, ns); err != nil {
			return err
		}
		if len(st.Groups) != 1 || len(st.Pods) != n || st.Bound() != n || len(st.Records) > 0 {
			return fmt.Errorf("%d podgroups, %d pods, %d bound, records %v", len(st.Groups), len(st.Pods), st.Bound(), st.Records)
		}
		return nil
	})
	if g := st.Groups[0].Spec.SchedulingPolicy.Gang; g == nil || g.MinCount != int32(n) {
		t.Errorf("podgroup %s policy %+v, want a gang of %d", st.Groups[0].Name, st.Groups[0].Spec.SchedulingPolicy, n)
	}
	return st
}

// checkNothingAllocated fails if anything of the namespace runs or holds
// devices: no pod bound, no claim allocated, no commit record.
func checkNothingAllocated(t *testing.T, c kubernetes.Interface, ns string) {
	t.Helper()
	st, err := itest.ReadGang(t.Context(), c, ns)
	itest.Must(t, "read gang", err)
	if st.Bound() != 0 || st.Allocated() != 0 || len(st.Records) != 0 {
		t.Fatalf("over quota: %d pods bound, %d claims allocated, records %v; want nothing", st.Bound(), st.Allocated(), st.Records)
	}
	t.Logf("over quota in %s: %d pods, %d podgroups, %d claims (none allocated)", ns, len(st.Pods), len(st.Groups), len(st.Claims))
}

// checkJobsSuspended fails unless every Job of the namespace is suspended.
func checkJobsSuspended(t *testing.T, c kubernetes.Interface, ns string) {
	t.Helper()
	jobs, err := c.BatchV1().Jobs(ns).List(t.Context(), metav1.ListOptions{})
	itest.Must(t, "list jobs", err)
	if len(jobs.Items) == 0 {
		t.Fatalf("no job in %s", ns)
	}
	for _, j := range jobs.Items {
		if j.Spec.Suspend == nil || !*j.Spec.Suspend {
			t.Errorf("job %s/%s unsuspended over quota", ns, j.Name)
		}
	}
}

// succeedPods reports every pod of the namespace Succeeded, as their
// kubelet would (the nodes have none).
func succeedPods(t *testing.T, c kubernetes.Interface, ns string) {
	t.Helper()
	pods, err := c.CoreV1().Pods(ns).List(t.Context(), metav1.ListOptions{})
	itest.Must(t, "list pods", err)
	now := metav1.Now()
	for _, p := range pods.Items {
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			cur, err := c.CoreV1().Pods(ns).Get(t.Context(), p.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			cur.Status.Phase = corev1.PodSucceeded
			cur.Status.ContainerStatuses = []corev1.ContainerStatus{{
				Name: cur.Spec.Containers[0].Name, Image: cur.Spec.Containers[0].Image,
				State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
					ExitCode: 0, Reason: "Completed", StartedAt: now, FinishedAt: now,
				}},
			}}
			_, err = c.CoreV1().Pods(ns).UpdateStatus(t.Context(), cur, metav1.UpdateOptions{})
			return err
		})
		itest.Must(t, "report pod succeeded", err)
	}
}

// waitJobComplete waits until the namespace's Job is complete.
func waitJobComplete(t *testing.T, c kubernetes.Interface, ns string) {
	t.Helper()
	itest.Poll(t, "job in "+ns+" complete", 60*time.Second, func(ctx context.Context) error {
		jobs, err := c.BatchV1().Jobs(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		for _, j := range jobs.Items {
			for _, cond := range j.Status.Conditions {
				if cond.Type == batchv1.JobComplete && cond.Status == corev1.ConditionTrue {
					return nil
				}
			}
		}
		return fmt.Errorf("not complete")
	})
}

// Kueue's pod integration: the label naming a pod's group, the annotation
// with the group's size, the scheduling gate its webhook sets.
const (
	kueuePodGroupLabel      = "kueue.x-k8s.io/pod-group-name"
	kueuePodGroupCountAnnot = "kueue.x-k8s.io/pod-group-total-count"
	kueueAdmissionGate      = "kueue.x-k8s.io/admission"
)

// submitKueuePodGroup creates a PodGroup (gang of n in one NVLink domain,
// shared fabric claim) and its n members in the team's LocalQueue, as one
// Kueue pod group, without gates: Kueue's webhook gates them.
func submitKueuePodGroup(t *testing.T, c kubernetes.Interface, ns, group string, n int) {
	t.Helper()
	_, err := c.SchedulingV1beta1().PodGroups(ns).Create(t.Context(), itest.TemplateGroup(ns, group, int32(n)), metav1.CreateOptions{})
	itest.Must(t, "create podgroup", err)
	for i := range n {
		p := itest.TemplatePod(ns, fmt.Sprintf("%s-%d", group, i), group)
		p.Labels = map[string]string{framework.KueueQueueLabel: kueueLocalQueue, kueuePodGroupLabel: group}
		p.Annotations = map[string]string{kueuePodGroupCountAnnot: fmt.Sprint(n)}
		created, err := c.CoreV1().Pods(ns).Create(t.Context(), p, metav1.CreateOptions{})
		itest.Must(t, "create pod", err)
		if !hasGate(created, kueueAdmissionGate) {
			t.Fatalf("pod %s/%s created with gates %v: Kueue's webhook did not gate it", ns, p.Name, created.Spec.SchedulingGates)
		}
	}
}

// checkPodsGated fails unless every pod of the namespace still has Kueue's
// admission gate, and gpufabric says so (PodScheduled=False,
// SchedulingGated, as kube-scheduler says).
func checkPodsGated(t *testing.T, c kubernetes.Interface, ns string) {
	t.Helper()
	pods, err := c.CoreV1().Pods(ns).List(t.Context(), metav1.ListOptions{})
	itest.Must(t, "list pods", err)
	if len(pods.Items) == 0 {
		t.Fatalf("no pod in %s", ns)
	}
	for _, p := range pods.Items {
		if !hasGate(&p, kueueAdmissionGate) {
			t.Errorf("pod %s/%s ungated over quota: %v", ns, p.Name, p.Spec.SchedulingGates)
		}
		if !hasCondition(&p, corev1.PodScheduled, corev1.PodReasonSchedulingGated) {
			t.Errorf("pod %s/%s conditions %+v, want PodScheduled=False SchedulingGated", ns, p.Name, p.Status.Conditions)
		}
	}
}

func hasGate(p *corev1.Pod, gate string) bool {
	for _, g := range p.Spec.SchedulingGates {
		if g.Name == gate {
			return true
		}
	}
	return false
}

func hasCondition(p *corev1.Pod, typ corev1.PodConditionType, reason string) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == typ && c.Status == corev1.ConditionFalse && c.Reason == reason {
			return true
		}
	}
	return false
}
