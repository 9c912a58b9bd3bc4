package scheduler

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/gpufabric/gpufabric/pkg/gang/scheduler"
	"github.com/gpufabric/gpufabric/pkg/topology"
	"github.com/gpufabric/gpufabric/test/integration/framework"
	"github.com/gpufabric/gpufabric/test/integration/itest"
)

// peerVictims are the running pods of the preemption comparison: each
// node of domains a and b runs one 4-GPU pod; the cheapest two victims
// (priority batch) sit in different domains.
var peerVictims = []struct{ name, node, class string }{
	{"low-a", "a-0", "batch"}, {"mid-a", "a-1", "research"},
	{"low-b", "b-0", "batch"}, {"mid-b", "b-1", "research"},
}

// The extended-resource variant: its namespaces' pods ask for
// peerExtendedResource (4 per node) instead of DRA claims.
const (
	peerExtendedResource = "example.com/gpu"
	peerExtendedNS       = "peer-kube-ext"
)

// peerWait is how long each scheduler gets to place the preemptor.
const peerWait = 30 * time.Second

// peerOutcome is what one scheduler did with the preemptor.
type peerOutcome struct {
	victims []string
	placed  time.Duration // 0: not placed in time
	domains []string
}

func (o peerOutcome) String() string {
	placed := fmt.Sprintf("not placed in %.0f s", peerWait.Seconds())
	if o.placed > 0 {
		placed = fmt.Sprintf("placed in %.1f s", o.placed.Seconds())
	}
	return fmt.Sprintf("victims %v (%d GPUs freed), %s, NVLink domains %v", o.victims, 4*len(o.victims), placed, o.domains)
}

// TestPreemptionBesideKubeScheduler runs issue 14's comparison on one real
// control plane (kube-controller-manager, kwok, kube-scheduler v1.37.1
// with GenericWorkload and PodGroupPreemptionPolicy): the same production
// gang of 2 × 4 GPUs with a topology constraint on the NVLink domain (a
// node label for kube-scheduler, the device attribute for gpufabric)
// arrives on a full cluster, first for gpufabric, then for kube-scheduler,
// then for kube-scheduler without the constraint.
// gpufabric must evict the two pods of one domain and place the gang
// inside it; kube-scheduler's choice is recorded (docs/benchmarks.md).
func TestPreemptionBesideKubeScheduler(t *testing.T) {
	cp := framework.StartT(t, framework.Options{ControllerManager: true, Kwok: true, KubeScheduler: true,
		ExtraFeatureGates: "PodGroupPreemptionPolicy=true"})
	admin := cp.AdminClient(t)
	itest.KwokFabric(t, admin, []string{"a", "b"}, 2, 4)
	domainKey := string(topology.Qualified(topology.AttrNVLinkDomain))
	for _, n := range []string{"a-0", "a-1", "b-0", "b-1"} {
		patch := fmt.Sprintf(`{"metadata":{"labels":{%q:%q}}}`, domainKey, itest.DomainOf(n))
		_, err := admin.CoreV1().Nodes().Patch(t.Context(), n, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
		itest.Must(t, "label node", err)
	}
	createPriorityClasses(t, admin)
	startScheduler(t, schedulerClient(t, cp, "gpufabric-scheduler"), scheduler.Config{})

	gf := runPeerPreemption(t, admin, "peer-gpufabric", topology.SchedulerName, true)
	t.Logf("gpufabric: %s", gf)
	ks := runPeerPreemption(t, admin, "peer-kube", corev1.DefaultSchedulerName, true)
	t.Logf("kube-scheduler v1.37.1: %s", ks)
	ku := runPeerPreemption(t, admin, "peer-kube-free", corev1.DefaultSchedulerName, false)
	t.Logf("kube-scheduler v1.37.1 without the topology constraint: %s", ku)
	// What kube-scheduler does where it can: the same pods asking for a
	// device plugin's extended resource instead of DRA claims.
	for _, n := range []string{"a-0", "a-1", "b-0", "b-1"} {
		patch := fmt.Sprintf(`{"status":{"capacity":{%[1]q:"4"},"allocatable":{%[1]q:"4"}}}`, peerExtendedResource)
		_, err := admin.CoreV1().Nodes().PatchStatus(t.Context(), n, []byte(patch))
		itest.Must(t, "advertise extended resource", err)
	}
	kx := runPeerPreemption(t, admin, peerExtendedNS, corev1.DefaultSchedulerName, true)
	t.Logf("kube-scheduler v1.37.1 on extended resources, topology constraint: %s", kx)
	kxu := runPeerPreemption(t, admin, peerExtendedNS+"-free", corev1.DefaultSchedulerName, false)
	t.Logf("kube-scheduler v1.37.1 on extended resources, no constraint: %s", kxu)

	if kx.placed == 0 {
		t.Errorf("kube-scheduler on extended resources: %s; the variant is there to see which victims it picks when it can preempt", kx)
	}
	if gf.placed == 0 || len(gf.domains) != 1 {
		t.Fatalf("gpufabric: %s; want the preemptor placed in one NVLink domain", gf)
	}
	d := strings.TrimPrefix(gf.domains[0], "dom-")
	if want := []string{"low-" + d, "mid-" + d}; !slices.Equal(gf.victims, want) {
		t.Errorf("gpufabric evicted %v, want %v (the pods of the domain it used)", gf.victims, want)
	}
}

func createPriorityClasses(t *testing.T, admin kubernetes.Interface) {
	t.Helper()
	for name, value := range testPriorities {
		pc := &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Value: value}
		if _, err := admin.SchedulingV1().PriorityClasses().Create(t.Context(), pc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("create priority class: %v", err)
		}
	}
}

// runPeerPreemption fills the four nodes with peerVictims, then creates
// the preemptor (with or without its topology constraint) and waits up to
// peerWait for it; everything is scheduled by
// schedulerName. The namespace is deleted and drained at the end.
func runPeerPreemption(t *testing.T, admin kubernetes.Interface, ns, schedulerName string, constrained bool) peerOutcome {
	t.Helper()
	ctx := t.Context()
	itest.GangNamespace(t, admin, ns, 4)
	for _, v := range peerVictims {
		p := peerPod(ns, v.name, "", schedulerName, v.class)
		p.Spec.NodeSelector = map[string]string{corev1.LabelHostname: v.node}
		_, err := admin.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
		itest.Must(t, "create victim", err)
	}
	itest.Poll(t, "victims running", 60*time.Second, func(ctx context.Context) error {
		return podsRunning(ctx, admin, ns, len(peerVictims))
	})
	pg := itest.TemplateGroup(ns, "prod", 2)
	pg.Spec.ResourceClaims = nil
	if !constrained {
		pg.Spec.SchedulingConstraints = nil
	}
	pg.Spec.PriorityClassName = "production"
	_, err := admin.SchedulingV1beta1().PodGroups(ns).Create(ctx, pg, metav1.CreateOptions{})
	itest.Must(t, "create preemptor group", err)
	start := time.Now()
	for i := range 2 {
		_, err := admin.CoreV1().Pods(ns).Create(ctx, peerPod(ns, fmt.Sprintf("prod-%d", i), "prod", schedulerName, "production"), metav1.CreateOptions{})
		itest.Must(t, "create preemptor", err)
	}
	var out peerOutcome
	deadline := start.Add(peerWait)
	for time.Now().Before(deadline) && out.placed == 0 {
		pods, err := admin.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		itest.Must(t, "list pods", err)
		out = peerState(pods.Items)
		if len(out.domains) > 0 && countPrefix(pods.Items, "prod-", true) == 2 {
			out.placed = time.Since(start)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if out.placed == 0 {
		logUnplaced(t, admin, ns, schedulerName)
	}
	if dup, err := itest.DevicesAllocatedTwice(ctx, admin); err != nil || len(dup) > 0 {
		t.Errorf("%s: devices allocated twice: %v %v", schedulerName, dup, err)
	}
	itest.Must(t, "delete namespace", admin.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}))
	itest.Poll(t, "namespace "+ns+" drained", 90*time.Second, func(ctx context.Context) error {
		_, err := admin.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("namespace still there: %v", err)
	})
	return out
}

// peerPod is a 4-GPU pod (no fabric claim) of group ("" for none).
func peerPod(ns, name, group, schedulerName, class string) *corev1.Pod {
	p := itest.TemplatePod(ns, name, group)
	if group == "" {
		p.Spec.SchedulingGroup = nil
	}
	p.Spec.SchedulerName, p.Spec.PriorityClassName = schedulerName, class
	p.Spec.ResourceClaims = p.Spec.ResourceClaims[1:]
	p.Spec.Containers[0].Resources.Claims = p.Spec.Containers[0].Resources.Claims[1:]
	if strings.HasPrefix(ns, peerExtendedNS) {
		four := resource.MustParse("4")
		p.Spec.ResourceClaims, p.Spec.Containers[0].Resources.Claims = nil, nil
		p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{peerExtendedResource: four}
		p.Spec.Containers[0].Resources.Requests = corev1.ResourceList{peerExtendedResource: four}
	}
	return p
}

// peerState reads the victims (victim pods being deleted or gone) and the
// NVLink domains of the bound preemptor pods.
func peerState(pods []corev1.Pod) peerOutcome {
	var out peerOutcome
	alive := map[string]bool{}
	doms := map[string]bool{}
	for _, p := range pods {
		if p.DeletionTimestamp == nil {
			alive[p.Name] = true
		}
		if strings.HasPrefix(p.Name, "prod-") && p.Spec.NodeName != "" {
			doms[itest.DomainOf(p.Spec.NodeName)] = true
		}
	}
	for _, v := range peerVictims {
		if !alive[v.name] {
			out.victims = append(out.victims, v.name)
		}
	}
	for d := range doms {
		out.domains = append(out.domains, d)
	}
	slices.Sort(out.domains)
	return out
}

func countPrefix(pods []corev1.Pod, prefix string, bound bool) int {
	n := 0
	for _, p := range pods {
		if strings.HasPrefix(p.Name, prefix) && (!bound || p.Spec.NodeName != "") {
			n++
		}
	}
	return n
}

func podsRunning(ctx context.Context, c kubernetes.Interface, ns string, want int) error {
	pods, err := c.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	running := 0
	for _, p := range pods.Items {
		if p.Status.Phase == corev1.PodRunning {
			running++
		}
	}
	if running != want {
		return fmt.Errorf("%d of %d pods running", running, want)
	}
	return nil
}

// logUnplaced logs why the preemptor was not placed: its pods'
// PodScheduled condition and its PodGroup's conditions.
func logUnplaced(t *testing.T, c kubernetes.Interface, ns, schedulerName string) {
	t.Helper()
	pods, err := c.CoreV1().Pods(ns).List(t.Context(), metav1.ListOptions{})
	itest.Must(t, "list pods", err)
	for _, p := range pods.Items {
		for _, cond := range p.Status.Conditions {
			if strings.HasPrefix(p.Name, "prod-") && cond.Type == corev1.PodScheduled {
				t.Logf("%s: %s PodScheduled=%s %s: %s (nominated %q)", schedulerName, p.Name, cond.Status, cond.Reason, cond.Message, p.Status.NominatedNodeName)
			}
		}
	}
	pg, err := c.SchedulingV1beta1().PodGroups(ns).Get(t.Context(), "prod", metav1.GetOptions{})
	itest.Must(t, "get prod", err)
	for _, cond := range pg.Status.Conditions {
		t.Logf("%s: PodGroup prod %s=%s %s: %s", schedulerName, cond.Type, cond.Status, cond.Reason, cond.Message)
	}
}
