package integration

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/gpufabric/gpufabric/pkg/gang/scheduler"
	"github.com/gpufabric/gpufabric/pkg/topology"
	"github.com/gpufabric/gpufabric/test/integration/framework"
)

// TestBesideKubeScheduler runs the real kube-scheduler v1.37.1 and
// gpufabric on the same apiserver and kwok nodes: kube-scheduler places a
// ReplicaSet's plain-claim pods (one GPU each) while gpufabric places gangs
// with fabric-domain channels, all created at once. In the end every pod
// runs and no device is allocated twice. Then two double allocations are
// injected as a race between the two schedulers would leave them (a GPU of
// a running gang pod, a gang's fabric-domain channel): the claim that lost
// is freed (its pod evicted, or the claim released) with an event, and the
// gang keeps its devices.
func TestBesideKubeScheduler(t *testing.T) {
	cp := framework.StartT(t, framework.Options{ControllerManager: true, Kwok: true, KubeScheduler: true})
	ctx := t.Context()
	admin := cp.AdminClient(t)
	kwokFabric(t, admin, []string{"a", "b"}, 4, 8)
	const ns = "shared"
	gangNamespace(t, admin, ns, 2)
	_, err := admin.ResourceV1().ResourceClaimTemplates(ns).Create(ctx, schedClaimTemplate(ns, oneGPUTemplate, topology.GPUDeviceClass, 1), metav1.CreateOptions{})
	must(t, "create template", err)
	startScheduler(t, schedulerClient(t, cp, "gpufabric-scheduler"), scheduler.Config{DomainChannels: 4})

	const gangs, gangPods, plainPods = 4, 4, 24
	var wg sync.WaitGroup
	wg.Go(func() {
		_, err := admin.AppsV1().ReplicaSets(ns).Create(ctx, plainReplicaSet(ns, "plain", plainPods), metav1.CreateOptions{})
		must(t, "create replicaset", err)
	})
	for g := range gangs {
		wg.Go(func() { createGang(t, admin, ns, fmt.Sprintf("g%d", g), gangPods, gangPods) })
	}
	wg.Wait()
	poll(t, "every pod runs, no device twice", 120*time.Second, func(ctx context.Context) error {
		pods, err := admin.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		running := map[string]int{}
		for _, p := range pods.Items {
			if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
				running[p.Spec.SchedulerName]++
			}
		}
		if running[topology.SchedulerName] != gangs*gangPods || running[corev1.DefaultSchedulerName] != plainPods {
			return fmt.Errorf("running: %v", running)
		}
		if dup, err := devicesAllocatedTwice(ctx, admin); err != nil || len(dup) > 0 {
			return fmt.Errorf("devices allocated twice: %v %v", dup, err)
		}
		return nil
	})

	st, err := readGang(ctx, admin, ns)
	must(t, "read state", err)
	var gangClaim, channelClaim resourceapi.ResourceClaim
	for _, c := range st.claims {
		if c.Status.Allocation == nil || len(c.Status.ReservedFor) == 0 {
			continue
		}
		switch r := c.Status.ReservedFor[0]; {
		case r.Resource == "pods" && r.Name == "g0-0":
			gangClaim = c
		case r.Resource == "podgroups" && r.Name == "g0":
			channelClaim = c
		}
	}
	if gangClaim.Name == "" || channelClaim.Name == "" {
		t.Fatalf("gang g0's claims not found: %+v", schedReservationsOf(st.claims))
	}

	// A pod allocated the GPU of a running gang member, bound to its node
	// (as if kube-scheduler had raced gpufabric).
	intruder := injectIntruder(t, admin, ns, "intruder", gangClaim.Status.Allocation.Devices.Results[0])
	// A claim holding gang g0's fabric-domain channel, reserved for a
	// PodGroup without members.
	channelThief := gpuClaim(ns, "channel-thief", 1)
	channelThief.Spec.Devices.Requests[0].Exactly.DeviceClassName = topology.FabricDomainDeviceClass
	channelThief, err = admin.ResourceV1().ResourceClaims(ns).Create(ctx, channelThief, metav1.CreateOptions{})
	must(t, "create channel thief", err)
	thiefGroup, err := admin.SchedulingV1beta1().PodGroups(ns).Create(ctx, podGroup(ns, "thief", 1, "channel-thief"), metav1.CreateOptions{})
	must(t, "create thief podgroup", err)
	channelThief.Status.Allocation = channelClaim.Status.Allocation.DeepCopy()
	channelThief.Status.Allocation.Devices.Results[0].Request = "gpus"
	channelThief.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{reservedForPodGroup(thiefGroup)}
	_, err = admin.ResourceV1().ResourceClaims(ns).UpdateStatus(ctx, channelThief, metav1.UpdateOptions{})
	must(t, "allocate the channel twice", err)

	poll(t, "double allocations repaired", 60*time.Second, func(ctx context.Context) error {
		if _, err := admin.CoreV1().Pods(ns).Get(ctx, intruder.Name, metav1.GetOptions{}); err == nil {
			return fmt.Errorf("intruder pod still exists")
		}
		c, err := admin.ResourceV1().ResourceClaims(ns).Get(ctx, "channel-thief", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if c.Status.Allocation != nil {
			return fmt.Errorf("channel thief still allocated")
		}
		if dup, err := devicesAllocatedTwice(ctx, admin); err != nil || len(dup) > 0 {
			return fmt.Errorf("devices allocated twice: %v %v", dup, err)
		}
		if err := schedFindEvent(ctx, admin, ns, intruder.Name, scheduler.EventDeviceDoubleBooked, "which keeps it"); err != nil {
			return err
		}
		return schedFindEvent(ctx, admin, ns, "channel-thief", scheduler.EventDeviceDoubleBooked, "allocation released")
	})
	after, err := readGang(ctx, admin, ns)
	must(t, "read state", err)
	if diff := claimDiff(st, after, gangClaim.Name, channelClaim.Name); diff != "" {
		t.Errorf("the gang's claims changed: %s", diff)
	}
}

// kwokFabric is fabricCluster with nodes whose lifecycle kwok runs (Ready,
// pods Running), as kube-scheduler needs.
func kwokFabric(t *testing.T, c kubernetes.Interface, domains []string, nodesPer, gpus int) {
	t.Helper()
	fabricCluster(t, c, nil, 0, 0) // device classes
	var names []string
	for _, d := range domains {
		for i := range nodesPer {
			name := fmt.Sprintf("%s-%d", d, i)
			n := node(name, map[string]string{corev1.LabelHostname: name})
			n.Annotations = map[string]string{framework.KwokNodeAnnotation: "fake"}
			_, err := c.CoreV1().Nodes().Create(t.Context(), n, metav1.CreateOptions{})
			must(t, "create node", err)
			_, err = c.ResourceV1().ResourceSlices().Create(t.Context(), gpuSlice(name, "dom-"+d, gpus), metav1.CreateOptions{})
			must(t, "create slice", err)
			names = append(names, name)
		}
	}
	poll(t, "kwok nodes ready", 60*time.Second, func(ctx context.Context) error {
		for _, name := range names {
			n, err := c.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if !nodeReady(n) || len(n.Spec.Taints) > 0 {
				return fmt.Errorf("node %s not ready or tainted %v", name, n.Spec.Taints)
			}
		}
		return nil
	})
}

// plainReplicaSet is n pods for kube-scheduler, each with a one-GPU claim
// from the template oneGPUTemplate.
func plainReplicaSet(ns, name string, n int32) *appsv1.ReplicaSet {
	labels := map[string]string{"app": name}
	return &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: appsv1.ReplicaSetSpec{
			Replicas: ptr.To(n),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					Containers: []corev1.Container{{
						Name: "app", Image: "registry.example/app:1",
						Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "gpu"}}},
					}},
					ResourceClaims: []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: ptr.To(oneGPUTemplate)}},
				},
			},
		},
	}
}

const oneGPUTemplate = "one-gpu"

// injectIntruder creates a pod of no scheduler with a claim allocated the
// devices devs (one node's), and binds it to that node.
func injectIntruder(t *testing.T, admin kubernetes.Interface, ns, name string, devs ...resourceapi.DeviceRequestAllocationResult) *corev1.Pod {
	t.Helper()
	ctx := t.Context()
	c, err := admin.ResourceV1().ResourceClaims(ns).Create(ctx, gpuClaim(ns, name, int64(len(devs))), metav1.CreateOptions{})
	must(t, "create intruder claim", err)
	p := memberPod(ns, name, "", "gpu", name)
	p.Spec.SchedulingGroup, p.Spec.SchedulerName = nil, "nobody"
	p, err = admin.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
	must(t, "create intruder pod", err)
	for i := range devs {
		devs[i].Request = "gpus"
	}
	c.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: devs}}
	c.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: p.Name, UID: p.UID}}
	_, err = admin.ResourceV1().ResourceClaims(ns).UpdateStatus(ctx, c, metav1.UpdateOptions{})
	must(t, "allocate the intruder's claim", err)
	must(t, "bind intruder", bindAs(admin, ns, p.Name, p.UID, devs[0].Pool)(ctx))
	return p
}

func schedReservationsOf(claims []resourceapi.ResourceClaim) map[string][]string {
	out := map[string][]string{}
	for _, c := range claims {
		out[c.Name] = schedReservations(c.Status.ReservedFor)
	}
	return out
}

// claimDiff compares named claims' allocations and reservations.
func claimDiff(before, after *gangState, names ...string) string {
	state := func(st *gangState) map[string]string {
		out := map[string]string{}
		for _, c := range st.claims {
			for _, n := range names {
				if c.Name == n {
					out[n] = fmt.Sprint(claimState(st, n)[n])
				}
			}
		}
		return out
	}
	b, a := state(before), state(after)
	if fmt.Sprint(b) != fmt.Sprint(a) {
		return fmt.Sprintf("before %v, after %v", b, a)
	}
	return ""
}
