package scheduler

import (
	"context"
	"fmt"
	"github.com/gpufabric/gpufabric/pkg/gang/vocab"
	"github.com/gpufabric/gpufabric/test/integration/itest"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	schedulingv1alpha3 "k8s.io/api/scheduling/v1alpha3"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/gpufabric/gpufabric/pkg/gang/scheduler"
	"github.com/gpufabric/gpufabric/pkg/topology"
	"github.com/gpufabric/gpufabric/test/integration/framework"
)

// TestSchedulerMinCountAndLateMembers: PodGroups of 3 pods with minCount 2
// on domains of 3 nodes, one of each taken: no domain holds 3, so 2 members
// are placed in one domain and the third waits, saying why, even though
// another domain has room: late members join only their gang's domain, with
// a shared fabric claim and without one. When the taken node of each gang's
// domain is freed, the third member goes there.
func TestSchedulerMinCountAndLateMembers(t *testing.T) {
	cp := framework.StartT(t, framework.Options{ControllerManager: true})
	admin := cp.AdminClient(t)
	itest.FabricCluster(t, admin, []string{"a", "b", "c"}, 3, 4)
	const ns = "mincount"
	itest.GangNamespace(t, admin, ns, 4)
	for _, d := range []string{"a", "b", "c"} {
		var devs []resourceapi.DeviceRequestAllocationResult
		for i := range 4 {
			devs = append(devs, resourceapi.DeviceRequestAllocationResult{Driver: topology.DriverName, Pool: d + "-2", Device: topology.GPUDeviceName(i)})
		}
		injectIntruder(t, admin, ns, "blocker-"+d, devs...)
	}
	startScheduler(t, schedulerClient(t, cp, "gpufabric-scheduler"), scheduler.Config{DomainChannels: 4})

	itest.CreateGang(t, admin, ns, "shared", 2, 3)
	waitBound(t, admin, ns, "shared", 2)
	plain := itest.TemplateGroup(ns, "plain", 2)
	plain.Spec.ResourceClaims = nil
	_, err := admin.SchedulingV1beta1().PodGroups(ns).Create(t.Context(), plain, metav1.CreateOptions{})
	itest.Must(t, "create podgroup", err)
	for i := range 3 {
		p := itest.TemplatePod(ns, fmt.Sprintf("plain-%d", i), "plain")
		p.Spec.ResourceClaims = p.Spec.ResourceClaims[1:]
		p.Spec.Containers[0].Resources.Claims = p.Spec.Containers[0].Resources.Claims[1:]
		_, err := admin.CoreV1().Pods(ns).Create(t.Context(), p, metav1.CreateOptions{})
		itest.Must(t, "create pod", err)
	}
	waitBound(t, admin, ns, "plain", 2)

	// The third members wait, though the third domain has room for both.
	domains := map[string]string{}
	for _, g := range []string{"shared", "plain"} {
		domains[g] = gangDomain(t, admin, ns, g)
		itest.Poll(t, g+"'s third member says it waits for its domain", 30*time.Second, func(ctx context.Context) error {
			p, err := admin.CoreV1().Pods(ns).Get(ctx, g+"-2", metav1.GetOptions{})
			if err != nil {
				return err
			}
			if p.Spec.NodeName != "" {
				return fmt.Errorf("bound to %s", p.Spec.NodeName)
			}
			return podScheduledSays(p, "where the gang runs")
		})
	}
	if domains["shared"] == domains["plain"] {
		t.Fatalf("both gangs in %s", domains["shared"])
	}
	pg, err := admin.SchedulingV1beta1().PodGroups(ns).Get(t.Context(), "plain", metav1.GetOptions{})
	itest.Must(t, "get podgroup", err)
	if c := findCondition(pg); c == nil || c.Status != metav1.ConditionTrue || !strings.Contains(c.Message, "placed 2 of 3 pods (minCount 2)") {
		t.Errorf("condition %+v, want True with placed 2 of 3", c)
	}
	time.Sleep(3 * time.Second) // several attempts: still waiting
	for _, g := range []string{"shared", "plain"} {
		if p, err := admin.CoreV1().Pods(ns).Get(t.Context(), g+"-2", metav1.GetOptions{}); err != nil || p.Spec.NodeName != "" {
			t.Fatalf("%s-2 placed outside its gang's domain: %v %v", g, p.Spec.NodeName, err)
		}
	}

	// The taken node of each gang's domain is freed: the third members go
	// there.
	for g, dom := range domains {
		d := strings.TrimPrefix(dom, "dom-")
		freeIntruder(t, admin, ns, "blocker-"+d)
		waitBound(t, admin, ns, g, 3)
		if got := gangDomain(t, admin, ns, g); got != dom {
			t.Errorf("gang %s now in %s, want %s", g, got, dom)
		}
	}
	st, err := itest.ReadGang(t.Context(), admin, ns)
	itest.Must(t, "read gang", err)
	if err := st.Consistent(true); err != nil {
		t.Error(err)
	}
}

// freeIntruder deletes an intruder's pod and deallocates its claim.
func freeIntruder(t *testing.T, admin kubernetes.Interface, ns, name string) {
	t.Helper()
	itest.Must(t, "delete pod", admin.CoreV1().Pods(ns).Delete(t.Context(), name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}))
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		c, err := admin.ResourceV1().ResourceClaims(ns).Get(t.Context(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		c.Status.Allocation, c.Status.ReservedFor = nil, nil
		_, err = admin.ResourceV1().ResourceClaims(ns).UpdateStatus(t.Context(), c, metav1.UpdateOptions{})
		return err
	})
	itest.Must(t, "deallocate", err)
}

// TestSchedulerSchedulingGates: a gated pod is never placed; a gang waits
// until minCount members are ungated, and nothing is allocated for it
// before; removing the gates lets it run.
func TestSchedulerSchedulingGates(t *testing.T) {
	cp := framework.StartT(t, framework.Options{ControllerManager: true})
	admin := cp.AdminClient(t)
	itest.FabricCluster(t, admin, []string{"a"}, 4, 4)
	const ns = "gates"
	itest.GangNamespace(t, admin, ns, 4)
	startScheduler(t, schedulerClient(t, cp, "gpufabric-scheduler"), scheduler.Config{DomainChannels: 4})

	_, err := admin.SchedulingV1beta1().PodGroups(ns).Create(t.Context(), itest.TemplateGroup(ns, "g", 3), metav1.CreateOptions{})
	itest.Must(t, "create podgroup", err)
	for i := range 3 {
		p := itest.TemplatePod(ns, fmt.Sprintf("g-%d", i), "g")
		if i == 2 {
			p.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: "example.com/quota"}}
		}
		_, err := admin.CoreV1().Pods(ns).Create(t.Context(), p, metav1.CreateOptions{})
		itest.Must(t, "create pod", err)
	}
	solo := itest.TemplatePod(ns, "solo", "")
	solo.Spec.SchedulingGroup = nil
	solo.Spec.ResourceClaims, solo.Spec.Containers[0].Resources.Claims = solo.Spec.ResourceClaims[1:], solo.Spec.Containers[0].Resources.Claims[1:]
	solo.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: "example.com/quota"}}
	_, err = admin.CoreV1().Pods(ns).Create(t.Context(), solo, metav1.CreateOptions{})
	itest.Must(t, "create gated pod", err)

	time.Sleep(5 * time.Second) // claims created, the scheduler had its chances
	st, err := itest.ReadGang(t.Context(), admin, ns)
	itest.Must(t, "read", err)
	if st.Bound() != 0 || st.Allocated() != 0 || len(st.Records) != 0 {
		t.Fatalf("gated gang: %d bound, %d claims allocated, records %v; want nothing", st.Bound(), st.Allocated(), st.Records)
	}
	for _, name := range []string{"g-2", "solo"} {
		patch := []byte(`{"spec":{"schedulingGates":null}}`)
		_, err := admin.CoreV1().Pods(ns).Patch(t.Context(), name, types.StrategicMergePatchType, patch, metav1.PatchOptions{})
		itest.Must(t, "remove gates", err)
	}
	waitBound(t, admin, ns, "g", 3)
	itest.Poll(t, "ungated single pod bound", 30*time.Second, func(ctx context.Context) error {
		p, err := admin.CoreV1().Pods(ns).Get(ctx, "solo", metav1.GetOptions{})
		if err == nil && p.Spec.NodeName == "" {
			err = fmt.Errorf("unbound")
		}
		return err
	})
}

// TestSchedulerIndexedJob: an Indexed Job with spec.scheduling (gang of 4,
// one NVLink domain, a fabric-domain claim shared by the group) goes through
// kube-controller-manager's Job controller, which creates the Workload, the
// PodGroup and the pods; gpufabric places the gang in one domain.
func TestSchedulerIndexedJob(t *testing.T) {
	cp := framework.StartT(t, framework.Options{ControllerManager: true})
	admin := cp.AdminClient(t)
	itest.FabricCluster(t, admin, []string{"a", "b"}, 4, 4)
	const ns = "jobs"
	itest.GangNamespace(t, admin, ns, 4)
	startScheduler(t, schedulerClient(t, cp, "gpufabric-scheduler"), scheduler.Config{DomainChannels: 4})

	job, err := admin.BatchV1().Jobs(ns).Create(t.Context(), indexedJob(ns, "train", 4), metav1.CreateOptions{})
	itest.Must(t, "create job", err)
	var pg schedulingv1beta1.PodGroup
	itest.Poll(t, "the Job controller creates the PodGroup", 60*time.Second, func(ctx context.Context) error {
		list, err := admin.SchedulingV1beta1().PodGroups(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		if len(list.Items) != 1 {
			return fmt.Errorf("%d podgroups", len(list.Items))
		}
		pg = list.Items[0]
		return nil
	})
	if g := pg.Spec.SchedulingPolicy.Gang; g == nil || g.MinCount != 4 {
		t.Errorf("podgroup policy %+v, want gang of 4", pg.Spec.SchedulingPolicy)
	}
	if c := pg.Spec.SchedulingConstraints; c == nil || len(c.Topology) != 1 || c.Topology[0].Key != topology.TopologyKeyNVLinkDomain {
		t.Errorf("podgroup constraints %+v", c)
	}
	var st *itest.GangState
	itest.Poll(t, "the Job's gang placed in one domain", 90*time.Second, func(ctx context.Context) error {
		var err error
		if st, err = itest.ReadGang(ctx, admin, ns); err != nil {
			return err
		}
		if st.Bound() != 4 || len(st.Records) > 0 {
			return fmt.Errorf("%d of 4 bound (job %s), records %v", st.Bound(), job.Name, st.Records)
		}
		return nil
	})
	checkPlacedGang(t, admin, st, pg.Name, 4)
	for _, p := range st.Pods {
		if _, ok := p.Labels[batchv1.JobCompletionIndexAnnotation]; !ok {
			t.Errorf("pod %s has no completion index label", p.Name)
		}
	}

	// A pod a JobSet made but that names no PodGroup (JobSet creates none)
	// is placed alone, never silently: a Warning says what to change.
	_, err = admin.ResourceV1().ResourceClaims(ns).Create(t.Context(), itest.GPUClaim(ns, "solo", 1), metav1.CreateOptions{})
	itest.Must(t, "create claim", err)
	solo := itest.MemberPod(ns, "solo", "", "gpu", "solo")
	solo.Spec.SchedulingGroup = nil
	solo.Labels = map[string]string{"jobset.sigs.k8s.io/jobset-name": "trainer"}
	_, err = admin.CoreV1().Pods(ns).Create(t.Context(), solo, metav1.CreateOptions{})
	itest.Must(t, "create pod", err)
	itest.Poll(t, "the JobSet's pod placed alone with a warning", 30*time.Second, func(ctx context.Context) error {
		p, err := admin.CoreV1().Pods(ns).Get(ctx, "solo", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p.Spec.NodeName == "" {
			return fmt.Errorf("not bound")
		}
		return schedFindEvent(ctx, admin, ns, "solo", vocab.EventPlacedWithoutGang, `belongs to JobSet "trainer"`)
	})
}

// indexedJob is an Indexed Job of n pods for gpufabric-scheduler: a gang
// of n in one NVLink domain sharing a fabric-domain claim, each pod with its
// own GPUs.
func indexedJob(ns, name string, n int32) *batchv1.Job {
	pod := itest.TemplatePod(ns, "", "")
	pod.Spec.SchedulingGroup = nil // the Job controller sets it
	pod.Spec.RestartPolicy = corev1.RestartPolicyNever
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: batchv1.JobSpec{
			Parallelism:    ptr.To(n),
			Completions:    ptr.To(n),
			CompletionMode: ptr.To(batchv1.IndexedCompletion),
			Scheduling: &batchv1.JobSchedulingConfiguration{
				SchedulingPolicy: &schedulingv1alpha3.WorkloadPodGroupSchedulingPolicy{
					Gang: &schedulingv1alpha3.WorkloadPodGroupGangSchedulingPolicy{MinCount: ptr.To(n)},
				},
				SchedulingConstraints: &schedulingv1alpha3.WorkloadPodGroupSchedulingConstraints{
					Topology: []schedulingv1alpha3.TopologyConstraint{{Key: topology.TopologyKeyNVLinkDomain}},
				},
				ResourceClaims: []schedulingv1alpha3.WorkloadPodGroupResourceClaim{{Name: itest.FabricTemplate, ResourceClaimTemplateName: ptr.To(itest.FabricTemplate)}},
			},
			Template: corev1.PodTemplateSpec{Spec: pod.Spec},
		},
	}
}

func waitBound(t *testing.T, c kubernetes.Interface, ns, group string, n int) {
	t.Helper()
	itest.Poll(t, fmt.Sprintf("%d pods of %s bound", n, group), 60*time.Second, func(ctx context.Context) error {
		st, err := itest.ReadGang(ctx, c, ns)
		if err != nil {
			return err
		}
		bound := 0
		for _, p := range st.Pods {
			if strings.HasPrefix(p.Name, group+"-") && p.Spec.NodeName != "" {
				bound++
			}
		}
		if bound != n || len(st.Records) > 0 {
			return fmt.Errorf("%d of %s bound, records %v", bound, group, st.Records)
		}
		return nil
	})
}

// gangDomain is the NVLink domain of a gang's bound pods (one, or fails).
func gangDomain(t *testing.T, c kubernetes.Interface, ns, group string) string {
	t.Helper()
	pods, err := c.CoreV1().Pods(ns).List(t.Context(), metav1.ListOptions{})
	itest.Must(t, "list pods", err)
	doms := map[string]bool{}
	for _, p := range pods.Items {
		if strings.HasPrefix(p.Name, group+"-") && p.Spec.NodeName != "" {
			doms[itest.DomainOf(p.Spec.NodeName)] = true
		}
	}
	if len(doms) != 1 {
		t.Fatalf("gang %s spans domains %v", group, doms)
	}
	for d := range doms {
		return d
	}
	return ""
}

func podScheduledSays(p *corev1.Pod, want string) error {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse {
			if strings.Contains(c.Message, want) {
				return nil
			}
			return fmt.Errorf("PodScheduled=False %q, want %q", c.Message, want)
		}
	}
	return fmt.Errorf("no PodScheduled=False condition: %+v", p.Status.Conditions)
}

func findCondition(pg *schedulingv1beta1.PodGroup) *metav1.Condition {
	for i := range pg.Status.Conditions {
		if pg.Status.Conditions[i].Type == schedulingv1beta1.PodGroupInitiallyScheduled {
			return &pg.Status.Conditions[i]
		}
	}
	return nil
}

// TestSchedulerGangLifecycle: a placed gang that loses members gets the
// MembersLost condition and an event saying how many of how many remain
// (a pod deleted, a node deleted), and MembersRestored once a recreated
// member runs again in the gang's domain. Pods whose PodGroup does not
// exist, or is being deleted, say so instead of a stale reason.
func TestSchedulerGangLifecycle(t *testing.T) {
	cp := framework.StartT(t, framework.Options{ControllerManager: true})
	ctx := t.Context()
	admin := cp.AdminClient(t)
	itest.FabricCluster(t, admin, []string{"a"}, 4, 4)
	const ns = "lifecycle"
	itest.GangNamespace(t, admin, ns, 4)
	startScheduler(t, schedulerClient(t, cp, "gpufabric-scheduler"), scheduler.Config{DomainChannels: 4})

	itest.CreateGang(t, admin, ns, "g", 3, 3)
	waitBound(t, admin, ns, "g", 3)
	itest.Must(t, "delete a member", admin.CoreV1().Pods(ns).Delete(ctx, "g-0", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}))
	waitMembersLost(t, admin, ns, "g", metav1.ConditionTrue, "2 of 3 members remain running (minCount 3); 1 deleted; below minCount")
	itest.Poll(t, "MembersLost event", 20*time.Second, func(ctx context.Context) error {
		return schedFindEvent(ctx, admin, ns, "g", vocab.EventMembersLost, "2 of 3 members remain")
	})
	itest.CreateMember(t, admin, ns, "g", 0) // the workload controller's replacement
	waitBound(t, admin, ns, "g", 3)
	waitMembersLost(t, admin, ns, "g", metav1.ConditionFalse, "all 3 members run")
	itest.Poll(t, "MembersRestored event", 20*time.Second, func(ctx context.Context) error {
		return schedFindEvent(ctx, admin, ns, "g", vocab.EventMembersRestored, "all 3 members run")
	})

	p, err := admin.CoreV1().Pods(ns).Get(ctx, "g-1", metav1.GetOptions{})
	itest.Must(t, "get member", err)
	itest.Must(t, "delete its node", admin.CoreV1().Nodes().Delete(ctx, p.Spec.NodeName, metav1.DeleteOptions{}))
	waitMembersLost(t, admin, ns, "g", metav1.ConditionTrue, "lost: g-1 on deleted node "+p.Spec.NodeName)

	// A pod naming a PodGroup that does not exist; a PodGroup deleted while
	// its members wait.
	orphan := itest.TemplatePod(ns, "orphan", "nowhere")
	orphan.Spec.ResourceClaims, orphan.Spec.Containers[0].Resources.Claims = orphan.Spec.ResourceClaims[1:], orphan.Spec.Containers[0].Resources.Claims[1:]
	_, err = admin.CoreV1().Pods(ns).Create(ctx, orphan, metav1.CreateOptions{})
	itest.Must(t, "create orphan", err)
	itest.CreateGang(t, admin, ns, "waiting", 3, 2) // minCount 3, two pods: waits
	time.Sleep(2 * time.Second)
	itest.Must(t, "delete waiting podgroup", admin.SchedulingV1beta1().PodGroups(ns).Delete(ctx, "waiting", metav1.DeleteOptions{}))
	for pod, want := range map[string]string{
		"orphan":    "pod group nowhere does not exist",
		"waiting-0": "pod group waiting is being deleted",
	} {
		itest.Poll(t, pod+" says why it waits", 30*time.Second, func(ctx context.Context) error {
			p, err := admin.CoreV1().Pods(ns).Get(ctx, pod, metav1.GetOptions{})
			if err != nil {
				return err
			}
			return podScheduledSays(p, want)
		})
	}
}

func waitMembersLost(t *testing.T, c kubernetes.Interface, ns, group string, status metav1.ConditionStatus, message string) {
	t.Helper()
	itest.Poll(t, fmt.Sprintf("%s MembersLost=%s %q", group, status, message), 60*time.Second, func(ctx context.Context) error {
		pg, err := c.SchedulingV1beta1().PodGroups(ns).Get(ctx, group, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, cond := range pg.Status.Conditions {
			if cond.Type == vocab.ConditionMembersLost {
				if cond.Status == status && strings.Contains(cond.Message, message) {
					return nil
				}
				return fmt.Errorf("condition %s: %s", cond.Status, cond.Message)
			}
		}
		return fmt.Errorf("no %s condition", vocab.ConditionMembersLost)
	})
}

// TestSchedulerPodFeatures: pod features beside devices are honoured or
// refused, never ignored: required anti-affinity between members spreads
// them over nodes; a bound local volume's node affinity pins its pod; a
// claim waiting for its first consumer and a required pod affinity are
// refused with the field named.
func TestSchedulerPodFeatures(t *testing.T) {
	cp := framework.StartT(t, framework.Options{ControllerManager: true})
	ctx := t.Context()
	admin := cp.AdminClient(t)
	itest.FabricCluster(t, admin, []string{"a"}, 4, 4)
	const ns = "features"
	itest.GangNamespace(t, admin, ns, 1)
	startScheduler(t, schedulerClient(t, cp, "gpufabric-scheduler"), scheduler.Config{DomainChannels: 4})

	// Anti-affinity: two 1-GPU members would share a node; they may not.
	_, err := admin.SchedulingV1beta1().PodGroups(ns).Create(ctx, itest.TemplateGroup(ns, "spread", 2), metav1.CreateOptions{})
	itest.Must(t, "create podgroup", err)
	for i := range 2 {
		p := itest.TemplatePod(ns, fmt.Sprintf("spread-%d", i), "spread")
		p.Labels = map[string]string{"gang": "spread"}
		p.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
			LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"gang": "spread"}}, TopologyKey: corev1.LabelHostname,
		}}}}
		_, err := admin.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
		itest.Must(t, "create pod", err)
	}
	waitBound(t, admin, ns, "spread", 2)
	p0, _ := admin.CoreV1().Pods(ns).Get(ctx, "spread-0", metav1.GetOptions{})
	p1, _ := admin.CoreV1().Pods(ns).Get(ctx, "spread-1", metav1.GetOptions{})
	if p0.Spec.NodeName == p1.Spec.NodeName {
		t.Errorf("members with anti-affinity share node %s", p0.Spec.NodeName)
	}

	// A local volume on a-3, bound: its pod goes there.
	localVolume(t, admin, ns, "data", "a-3")
	local := itest.TemplatePod(ns, "local", "")
	local.Spec.SchedulingGroup = nil
	local.Spec.ResourceClaims, local.Spec.Containers[0].Resources.Claims = local.Spec.ResourceClaims[1:], local.Spec.Containers[0].Resources.Claims[1:]
	local.Spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data"}}}}
	_, err = admin.CoreV1().Pods(ns).Create(ctx, local, metav1.CreateOptions{})
	itest.Must(t, "create pod with a local volume", err)
	itest.Poll(t, "pod with a local volume bound to its node", 60*time.Second, func(ctx context.Context) error {
		p, err := admin.CoreV1().Pods(ns).Get(ctx, "local", metav1.GetOptions{})
		if err == nil && p.Spec.NodeName != "a-3" {
			err = fmt.Errorf("on %q", p.Spec.NodeName)
		}
		return err
	})

	// Refused, with the field named.
	wffc := storagev1.VolumeBindingWaitForFirstConsumer
	_, err = admin.StorageV1().StorageClasses().Create(ctx, &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "late"}, Provisioner: "example.com/none", VolumeBindingMode: &wffc}, metav1.CreateOptions{})
	itest.Must(t, "create storage class", err)
	_, err = admin.CoreV1().PersistentVolumeClaims(ns).Create(ctx, &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "late", Namespace: ns},
		Spec: corev1.PersistentVolumeClaimSpec{StorageClassName: ptr.To("late"), AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}},
	}, metav1.CreateOptions{})
	itest.Must(t, "create claim", err)
	for name, mutate := range map[string]func(*corev1.Pod){
		"waits-for-consumer": func(p *corev1.Pod) {
			p.Spec.Volumes = []corev1.Volume{{Name: "scratch", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "late"}}}}
		},
		"with-affinity": func(p *corev1.Pod) {
			p.Spec.Affinity = &corev1.Affinity{PodAffinity: &corev1.PodAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
				LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"gang": "spread"}}, TopologyKey: corev1.LabelHostname,
			}}}}
		},
	} {
		_, err := admin.SchedulingV1beta1().PodGroups(ns).Create(ctx, itest.TemplateGroup(ns, name, 1), metav1.CreateOptions{})
		itest.Must(t, "create podgroup", err)
		p := itest.TemplatePod(ns, name+"-0", name)
		mutate(p)
		_, err = admin.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
		itest.Must(t, "create pod", err)
	}
	for name, field := range map[string]string{
		"waits-for-consumer": "spec.volumes[0] (scratch): claim late waits for its first consumer",
		"with-affinity":      "spec.affinity.podAffinity.requiredDuringSchedulingIgnoredDuringExecution",
	} {
		itest.Poll(t, name+" refused naming the field", 30*time.Second, func(ctx context.Context) error {
			pg, err := admin.SchedulingV1beta1().PodGroups(ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			c := findCondition(pg)
			if c == nil || c.Status != metav1.ConditionFalse || c.Reason != schedulingv1beta1.PodGroupReasonUnschedulable ||
				!strings.Contains(c.Message, field) || !strings.Contains(c.Message, "not supported by gpufabric-scheduler") {
				return fmt.Errorf("condition %+v", c)
			}
			return nil
		})
	}
}

// localVolume creates a local PersistentVolume on node and a claim bound to
// it (kube-controller-manager completes the binding).
func localVolume(t *testing.T, c kubernetes.Interface, ns, name, node string) {
	t.Helper()
	ctx := t.Context()
	fs := corev1.PersistentVolumeFilesystem
	_, err := c.CoreV1().PersistentVolumes().Create(ctx, &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: ns + "-" + name},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:               corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
			AccessModes:            []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			VolumeMode:             &fs,
			StorageClassName:       "local",
			PersistentVolumeSource: corev1.PersistentVolumeSource{Local: &corev1.LocalVolumeSource{Path: "/mnt/" + name}},
			ClaimRef:               &corev1.ObjectReference{Namespace: ns, Name: name},
			NodeAffinity: &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
				MatchExpressions: []corev1.NodeSelectorRequirement{{Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn, Values: []string{node}}},
			}}}},
		},
	}, metav1.CreateOptions{})
	itest.Must(t, "create volume", err)
	_, err = c.CoreV1().PersistentVolumeClaims(ns).Create(ctx, &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.PersistentVolumeClaimSpec{StorageClassName: ptr.To("local"), VolumeName: ns + "-" + name,
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}},
	}, metav1.CreateOptions{})
	itest.Must(t, "create claim", err)
}
