package peer

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"

	"github.com/gpufabric/gpufabric/pkg/gang/commit"
	"github.com/gpufabric/gpufabric/pkg/topology"
	"github.com/gpufabric/gpufabric/test/integration/framework"
	"github.com/gpufabric/gpufabric/test/integration/itest"
)

// floorShape is a one-gang commit whose API floor BenchmarkPeer measures:
// pods members with one claim of gpu GPUs each.
type floorShape struct {
	name      string
	pods, gpu int
}

func floorShapeOf(w peerWorkload) floorShape {
	return floorShape{name: fmt.Sprintf("%dx%dgpu", w.pods, w.gpu), pods: w.pods, gpu: w.gpu}
}

// floorShapes are the distinct shapes of the one-gang workloads.
func floorShapes(workloads []peerWorkload) []floorShape {
	var out []floorShape
	for _, w := range workloads {
		if s := floorShapeOf(w); w.gangs == 1 && !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}

// peerFloor is the API floor of committing one gang of shape on this
// apiserver: the writes gpufabric-scheduler's commit makes before the
// gang's last pod is bound (pkg/gang/commit/txn.go, Txn.writeAll), with
// no decision to make and no informer to wait for.
//
// Untimed, in namespace ns: shape.pods claims and unscheduled pods (of a
// schedulerName no scheduler serves). Timed, with client (the scheduler's
// identity at the schedulers' QPS and burst) and per phase the commit's
// parallelism (benchWorkers = scheduler.DefaultCommitParallelism), one
// phase after the other as in the commit: the commit record (one
// ConfigMap naming every pod, node, claim and allocation fingerprint);
// per claim the deallocation finalizer (update) then allocation +
// reservedFor (status update); per pod its pods/binding; until the
// informer has observed every pod bound. The PodGroup condition and the
// record's delete come after the last bind and are left out. Returns the
// seconds and this process's CPU over them (the writes, and watches of
// the namespace's pods and claims, as a scheduler's informers have: the
// least CPU a scheduler can spend on the commit); ns is deleted and
// drained before it returns.
func peerFloor(b *testing.B, admin, client kubernetes.Interface, shape floorShape, nodes int, ns string) apiFloor {
	benchNamespace(b, admin, ns)
	pw := watchPods(b, admin, ns, shape.pods)
	watchClaims(b, admin, ns)
	pods, claims := floorObjects(b, admin, ns, shape)
	pw.wait(b, "floor pods seen", func(c podCounts) bool { return c.seen == shape.pods })
	allocs := make([]*resourceapi.AllocationResult, shape.pods)
	for j := range allocs {
		allocs[j] = floorAllocation(j, shape.gpu, nodes)
	}
	record := floorRecord(b, ns, pods, claims, allocs)
	ctx := b.Context()
	// The client's connection and discovery must not count.
	_, err := client.ResourceV1().ResourceClaims(ns).List(ctx, metav1.ListOptions{Limit: 1})
	itest.Must(b, "warm floor client", err)

	self, err := framework.SelfStats()
	itest.Must(b, "process stats", err)
	start := time.Now()
	_, err = client.CoreV1().ConfigMaps(itest.RecordNamespace).Create(ctx, record, metav1.CreateOptions{})
	itest.Must(b, "create floor record", err)
	err = forEachParallel(ctx, benchWorkers, shape.pods, func(ctx context.Context, j int) error {
		return floorClaimWrite(ctx, client, claims[j], pods[j], allocs[j])
	})
	itest.Must(b, "floor claim writes", err)
	err = forEachParallel(ctx, benchWorkers, shape.pods, func(ctx context.Context, j int) error {
		bind := &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: pods[j].Name, UID: pods[j].UID},
			Target: corev1.ObjectReference{Kind: "Node", Name: allocs[j].Devices.Results[0].Pool}}
		return client.CoreV1().Pods(ns).Bind(ctx, bind, metav1.CreateOptions{})
	})
	itest.Must(b, "floor binds", err)
	counts := pw.wait(b, "floor pods bound", func(c podCounts) bool { return c.bound == shape.pods })
	after, err := framework.SelfStats()
	itest.Must(b, "process stats", err)
	floor := apiFloor{seconds: counts.allBound.Sub(start).Seconds(), cpu: after.CPU - self.CPU}

	// kwok's status updates of the started pods must not spill into the
	// next run.
	pw.wait(b, "floor pods running", func(c podCounts) bool { return c.running == shape.pods })
	itest.Must(b, "delete floor record", admin.CoreV1().ConfigMaps(itest.RecordNamespace).Delete(ctx, record.Name, metav1.DeleteOptions{}))
	peerDropNamespace(b, admin, ns)
	return floor
}

// apiFloor is one measurement of peerFloor.
type apiFloor struct {
	seconds float64
	cpu     time.Duration
}

// watchClaims runs an informer on the claims of namespace ns until the
// benchmark ends.
func watchClaims(b *testing.B, c kubernetes.Interface, ns string) {
	factory := informers.NewSharedInformerFactoryWithOptions(c, 0, informers.WithNamespace(ns))
	factory.Resource().V1().ResourceClaims().Informer()
	runFactory(b, factory)
}

// floorObjects creates the floor's claims and pods (in parallel) and
// returns them as created.
func floorObjects(b *testing.B, admin kubernetes.Interface, ns string, shape floorShape) ([]*corev1.Pod, []*resourceapi.ResourceClaim) {
	pods, claims := make([]*corev1.Pod, shape.pods), make([]*resourceapi.ResourceClaim, shape.pods)
	err := forEachParallel(b.Context(), benchWorkers, shape.pods, func(ctx context.Context, j int) error {
		name := fmt.Sprintf("floor-%03d", j)
		c, err := admin.ResourceV1().ResourceClaims(ns).Create(ctx, itest.GPUClaim(ns, name+"-gpu", int64(shape.gpu)), metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("create claim: %w", err)
		}
		p := itest.MemberPod(ns, name, "floor", "gpu", c.Name)
		p.Spec.SchedulerName, p.Spec.SchedulingGroup = "peer-floor-no-scheduler", nil
		if p, err = admin.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create pod: %w", err)
		}
		pods[j], claims[j] = p, c
		return nil
	})
	itest.Must(b, "create floor objects", err)
	return pods, claims
}

// floorAllocation is the allocation of member j's gpu GPUs, as the
// scheduler writes one for node-local devices: consecutive GPUs of the
// p-nXXXX nodes, wrapping around the cluster's nodes.
func floorAllocation(j, gpu, nodes int) *resourceapi.AllocationResult {
	first := j * gpu
	return gpuAllocation(fmt.Sprintf("p-n%04d", (first/benchGPUs)%nodes), first%benchGPUs, gpu)
}

// gpuAllocation allocates gpu GPUs of node from GPU first on (wrapping
// around the node's benchGPUs).
func gpuAllocation(node string, first, gpu int) *resourceapi.AllocationResult {
	a := &resourceapi.AllocationResult{NodeSelector: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
		MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{node}}},
	}}}}
	for k := range gpu {
		a.Devices.Results = append(a.Devices.Results, resourceapi.DeviceRequestAllocationResult{
			Request: "gpus", Driver: topology.DriverName, Pool: node, Device: topology.GPUDeviceName((first + k) % benchGPUs)})
	}
	return a
}

// floorClaimWrite is writeClaim's pair of writes: the deallocation
// finalizer, then allocation and reservation for pod in one status update.
func floorClaimWrite(ctx context.Context, client kubernetes.Interface, c *resourceapi.ResourceClaim, pod *corev1.Pod, alloc *resourceapi.AllocationResult) error {
	claims := client.ResourceV1().ResourceClaims(c.Namespace)
	c = c.DeepCopy()
	c.Finalizers = append(c.Finalizers, resourceapi.Finalizer)
	c, err := claims.Update(ctx, c, metav1.UpdateOptions{})
	if err != nil {
		return fmt.Errorf("add finalizer to claim %s: %w", c.Name, err)
	}
	now := metav1.Now()
	c.Status.Allocation = alloc.DeepCopy()
	c.Status.Allocation.AllocationTimestamp = &now
	c.Status.ReservedFor = append(c.Status.ReservedFor, resourceapi.ResourceClaimConsumerReference{Resource: "pods", Name: pod.Name, UID: pod.UID})
	if _, err := claims.UpdateStatus(ctx, c, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("allocate claim %s: %w", c.Name, err)
	}
	return nil
}

// floorRecord is a ConfigMap the size of the commit record of the floor's
// gang (the scheduler's record format: pods with UID and node, claims with
// UID, pod and allocation fingerprint), without the record label, so that
// the scheduler leaves it alone.
func floorRecord(b *testing.B, ns string, pods []*corev1.Pod, claims []*resourceapi.ResourceClaim, allocs []*resourceapi.AllocationResult) *corev1.ConfigMap {
	type entry struct {
		Name  string `json:"name"`
		UID   string `json:"uid"`
		Node  string `json:"node,omitempty"`
		Pod   string `json:"pod,omitempty"`
		Alloc string `json:"alloc,omitempty"`
	}
	var rec struct {
		Pods   []entry `json:"pods"`
		Claims []entry `json:"claims"`
	}
	for j := range pods {
		rec.Pods = append(rec.Pods, entry{Name: pods[j].Name, UID: string(pods[j].UID), Node: allocs[j].Devices.Results[0].Pool})
		rec.Claims = append(rec.Claims, entry{Name: claims[j].Name, UID: string(claims[j].UID), Pod: pods[j].Name, Alloc: commit.AllocationFingerprint(allocs[j])})
	}
	raw, err := json.Marshal(rec)
	itest.Must(b, "encode floor record", err)
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: itest.RecordNamespace, Name: "peer-floor-" + ns}, Data: map[string]string{"record": string(raw)}}
}
