package scheduler

import (
	"context"
	"fmt"
	"github.com/gpufabric/gpufabric/pkg/gang/vocab"
	"github.com/gpufabric/gpufabric/test/integration/itest"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
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
// gang keeps its devices. The losers' deallocation made kube-scheduler
// forget devices the gang still holds (its allocated-device set has no
// count): gpufabric's holds make it see them again (checkHolds).
func TestBesideKubeScheduler(t *testing.T) {
	cp := framework.StartT(t, framework.Options{ControllerManager: true, Kwok: true, KubeScheduler: true})
	ctx := t.Context()
	admin := cp.AdminClient(t)
	itest.KwokFabric(t, admin, []string{"a", "b"}, 4, 8)
	const ns = "shared"
	itest.GangNamespace(t, admin, ns, 2)
	_, err := admin.ResourceV1().ResourceClaimTemplates(ns).Create(ctx, itest.ClaimTemplate(ns, oneGPUTemplate, topology.GPUDeviceClass, 1), metav1.CreateOptions{})
	itest.Must(t, "create template", err)
	startScheduler(t, schedulerClient(t, cp, "gpufabric-scheduler"), scheduler.Config{DomainChannels: 4})

	const gangs, gangPods, plainPods = 4, 4, 24
	var wg sync.WaitGroup
	wg.Go(func() {
		_, err := admin.AppsV1().ReplicaSets(ns).Create(ctx, plainReplicaSet(ns, "plain", plainPods), metav1.CreateOptions{})
		itest.Must(t, "create replicaset", err)
	})
	for g := range gangs {
		wg.Go(func() { itest.CreateGang(t, admin, ns, fmt.Sprintf("g%d", g), gangPods, gangPods) })
	}
	wg.Wait()
	itest.Poll(t, "every pod runs, no device twice", 120*time.Second, func(ctx context.Context) error {
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
		if dup, err := itest.DevicesAllocatedTwice(ctx, admin); err != nil || len(dup) > 0 {
			return fmt.Errorf("devices allocated twice: %v %v", dup, err)
		}
		return nil
	})

	st, err := itest.ReadGang(ctx, admin, ns)
	itest.Must(t, "read state", err)
	var gangClaim, channelClaim resourceapi.ResourceClaim
	for _, c := range st.Claims {
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
		t.Fatalf("gang g0's claims not found: %+v", schedReservationsOf(st.Claims))
	}

	// A pod allocated the GPU of a running gang member, bound to its node
	// (as if kube-scheduler had raced gpufabric).
	intruder := injectIntruder(t, admin, ns, "intruder", gangClaim.Status.Allocation.Devices.Results[0])
	// A claim holding gang g0's fabric-domain channel, reserved for a
	// PodGroup without members.
	channelThief := itest.GPUClaim(ns, "channel-thief", 1)
	channelThief.Spec.Devices.Requests[0].Exactly.DeviceClassName = topology.FabricDomainDeviceClass
	channelThief, err = admin.ResourceV1().ResourceClaims(ns).Create(ctx, channelThief, metav1.CreateOptions{})
	itest.Must(t, "create channel thief", err)
	thiefGroup, err := admin.SchedulingV1beta1().PodGroups(ns).Create(ctx, itest.PodGroup(ns, "thief", 1, "channel-thief"), metav1.CreateOptions{})
	itest.Must(t, "create thief podgroup", err)
	channelThief.Status.Allocation = channelClaim.Status.Allocation.DeepCopy()
	channelThief.Status.Allocation.Devices.Results[0].Request = "gpus"
	channelThief.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{itest.ReservedForPodGroup(thiefGroup)}
	_, err = admin.ResourceV1().ResourceClaims(ns).UpdateStatus(ctx, channelThief, metav1.UpdateOptions{})
	itest.Must(t, "allocate the channel twice", err)

	itest.Poll(t, "double allocations repaired", 60*time.Second, func(ctx context.Context) error {
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
		if dup, err := itest.DevicesAllocatedTwice(ctx, admin); err != nil || len(dup) > 0 {
			return fmt.Errorf("devices allocated twice: %v %v", dup, err)
		}
		if err := schedFindEvent(ctx, admin, ns, intruder.Name, vocab.EventDeviceDoubleBooked, "which keeps it"); err != nil {
			return err
		}
		return schedFindEvent(ctx, admin, ns, "channel-thief", vocab.EventDeviceDoubleBooked, "allocation released")
	})
	after, err := itest.ReadGang(ctx, admin, ns)
	itest.Must(t, "read state", err)
	if diff := claimDiff(st, after, gangClaim.Name, channelClaim.Name); diff != "" {
		t.Errorf("the gang's claims changed: %s", diff)
	}
	checkHolds(t, admin, ns, &gangClaim, &channelClaim)
}

// checkHolds: after the repair, each kept claim has a hold, and
// kube-scheduler does not give the kept GPU to a pod that can use only it;
// once the gang pod holding it is deleted, the hold goes and that pod gets
// the GPU.
func checkHolds(t *testing.T, admin kubernetes.Interface, ns string, gangClaim, channelClaim *resourceapi.ResourceClaim) {
	ctx := t.Context()
	// holds: the devices held for each claim (phase one's races may
	// have made holds for other claims too).
	holds := func(ctx context.Context) (map[types.UID]sets.Set[string], error) {
		list, err := admin.ResourceV1().ResourceClaims(itest.RecordNamespace).List(ctx, metav1.ListOptions{LabelSelector: vocab.HoldLabel})
		if err != nil {
			return nil, err
		}
		out := map[types.UID]sets.Set[string]{}
		for _, h := range list.Items {
			if h.Status.Allocation == nil {
				return nil, fmt.Errorf("hold %s not allocated", h.Name)
			}
			uid := types.UID(h.Labels[vocab.HoldLabel])
			if out[uid] == nil {
				out[uid] = sets.New[string]()
			}
			for _, r := range h.Status.Allocation.Devices.Results {
				out[uid].Insert(r.Pool + "/" + r.Device)
			}
		}
		return out, nil
	}
	devices := func(c *resourceapi.ResourceClaim) sets.Set[string] {
		out := sets.New[string]()
		for _, r := range c.Status.Allocation.Devices.Results {
			out.Insert(r.Pool + "/" + r.Device)
		}
		return out
	}
	itest.Poll(t, "the kept claims held", 30*time.Second, func(ctx context.Context) error {
		got, err := holds(ctx)
		if err != nil {
			return err
		}
		for _, c := range []*resourceapi.ResourceClaim{gangClaim, channelClaim} {
			if !got[c.UID].Equal(devices(c)) {
				return fmt.Errorf("holds %v, want one for claim %s holding %v", got, c.Name, sets.List(devices(c)))
			}
		}
		return nil
	})

	// A pod of kube-scheduler that fits only on the GPU the intruder took.
	d := gangClaim.Status.Allocation.Devices.Results[0]
	var rail int
	_, err := fmt.Sscanf(d.Device, "gpu-%d", &rail)
	itest.Must(t, "read the GPU's rail", err)
	prober := itest.GPUClaim(ns, "prober", 1)
	prober.Spec.Devices.Requests[0].Exactly.Selectors = []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
		Expression: fmt.Sprintf(`device.attributes["gpufabric.dev"].ibRail == %d`, rail)}}}
	_, err = admin.ResourceV1().ResourceClaims(ns).Create(ctx, prober, metav1.CreateOptions{})
	itest.Must(t, "create prober claim", err)
	p := itest.MemberPod(ns, "prober", "", "gpu", "prober")
	p.Spec.SchedulingGroup, p.Spec.SchedulerName = nil, corev1.DefaultSchedulerName
	p.Spec.NodeSelector = map[string]string{corev1.LabelHostname: d.Pool}
	_, err = admin.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
	itest.Must(t, "create prober pod", err)
	itest.Poll(t, "kube-scheduler finds the held GPU taken", 30*time.Second, func(ctx context.Context) error {
		p, err := admin.CoreV1().Pods(ns).Get(ctx, "prober", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("the prober was evicted: kube-scheduler gave it the held GPU, repair took it back")
		}
		if err != nil {
			return err
		}
		if p.Spec.NodeName != "" {
			return fmt.Errorf("kube-scheduler bound the prober to %s", p.Spec.NodeName)
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
				return nil
			}
		}
		return fmt.Errorf("prober not yet found unschedulable: %+v", p.Status.Conditions)
	})
	time.Sleep(2 * time.Second) // a forgotten GPU would be given within a scheduling cycle
	c, err := admin.ResourceV1().ResourceClaims(ns).Get(ctx, "prober", metav1.GetOptions{})
	itest.Must(t, "get prober claim", err)
	if c.Status.Allocation != nil {
		t.Fatalf("kube-scheduler allocated the held GPU: %+v", c.Status.Allocation.Devices.Results)
	}

	// The gang pod goes: its claim is deallocated, the hold deleted, and
	// kube-scheduler gives the GPU to the prober.
	itest.Must(t, "delete gang pod", admin.CoreV1().Pods(ns).Delete(ctx, gangClaim.Status.ReservedFor[0].Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}))
	itest.Poll(t, "the prober gets the GPU, the gang claim's hold is gone", 60*time.Second, func(ctx context.Context) error {
		c, err := admin.ResourceV1().ResourceClaims(ns).Get(ctx, "prober", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if c.Status.Allocation == nil || c.Status.Allocation.Devices.Results[0].Device != d.Device || c.Status.Allocation.Devices.Results[0].Pool != d.Pool {
			return fmt.Errorf("prober allocation %+v, want %s/%s", c.Status.Allocation, d.Pool, d.Device)
		}
		got, err := holds(ctx)
		if err != nil {
			return err
		}
		if got[gangClaim.UID] != nil || got[channelClaim.UID] == nil {
			return fmt.Errorf("holds %v: want the channel claim's kept, the gang claim's gone", got)
		}
		if dup, err := itest.DevicesAllocatedTwice(ctx, admin); err != nil || len(dup) > 0 {
			return fmt.Errorf("devices allocated twice: %v %v", dup, err)
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
	c, err := admin.ResourceV1().ResourceClaims(ns).Create(ctx, itest.GPUClaim(ns, name, int64(len(devs))), metav1.CreateOptions{})
	itest.Must(t, "create intruder claim", err)
	p := itest.MemberPod(ns, name, "", "gpu", name)
	p.Spec.SchedulingGroup, p.Spec.SchedulerName = nil, "nobody"
	p, err = admin.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
	itest.Must(t, "create intruder pod", err)
	for i := range devs {
		devs[i].Request = "gpus"
	}
	c.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: devs}}
	c.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: p.Name, UID: p.UID}}
	_, err = admin.ResourceV1().ResourceClaims(ns).UpdateStatus(ctx, c, metav1.UpdateOptions{})
	itest.Must(t, "allocate the intruder's claim", err)
	itest.Must(t, "bind intruder", itest.BindAs(admin, ns, p.Name, p.UID, devs[0].Pool)(ctx))
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
func claimDiff(before, after *itest.GangState, names ...string) string {
	state := func(st *itest.GangState) map[string]string {
		out := map[string]string{}
		for _, c := range st.Claims {
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
