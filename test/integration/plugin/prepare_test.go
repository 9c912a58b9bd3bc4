package plugin

import (
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"

	"github.com/gpufabric/gpufabric/pkg/topology"
	"github.com/gpufabric/gpufabric/test/integration/framework"
	"github.com/gpufabric/gpufabric/test/integration/itest"
)

// allocated creates a claim with one request per entry of devices and writes
// its allocation (pool/device per request) and reservedFor, as a scheduler
// would.
func allocated(t *testing.T, c kubernetes.Interface, name string, devices map[string][]string, consumer resourceapi.ResourceClaimConsumerReference) *resourceapi.ResourceClaim {
	t.Helper()
	ctx := t.Context()
	claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceDefault, Name: name}}
	var results []resourceapi.DeviceRequestAllocationResult
	for _, req := range slices.Sorted(maps.Keys(devices)) {
		claim.Spec.Devices.Requests = append(claim.Spec.Devices.Requests, resourceapi.DeviceRequest{
			Name: req, Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: topology.GPUDeviceClass, Count: int64(len(devices[req]))},
		})
		for _, pd := range devices[req] {
			pool, dev, _ := strings.Cut(pd, "/")
			results = append(results, resourceapi.DeviceRequestAllocationResult{Request: req, Driver: topology.DriverName, Pool: pool, Device: dev})
		}
	}
	claim, err := c.ResourceV1().ResourceClaims(claim.Namespace).Create(ctx, claim, metav1.CreateOptions{})
	itest.Must(t, "create claim "+name, err)
	claim.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: results}}
	claim.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{consumer}
	claim, err = c.ResourceV1().ResourceClaims(claim.Namespace).UpdateStatus(ctx, claim, metav1.UpdateOptions{})
	itest.Must(t, "allocate claim "+name, err)
	return claim
}

func claimRef(c *resourceapi.ResourceClaim) *drapb.Claim {
	return &drapb.Claim{Namespace: c.Namespace, Name: c.Name, Uid: string(c.UID)}
}

func cdiSpecPath(p *framework.Plugin, uid types.UID) string {
	return filepath.Join(p.CDIRoot(), topology.DriverName+"-claim_"+string(uid)+".json")
}

func prepare(t *testing.T, dra drapb.DRAPluginClient, claims ...*resourceapi.ResourceClaim) map[string]*drapb.NodePrepareResourceResponse {
	t.Helper()
	req := &drapb.NodePrepareResourcesRequest{}
	for _, c := range claims {
		req.Claims = append(req.Claims, claimRef(c))
	}
	resp, err := dra.NodePrepareResources(t.Context(), req)
	itest.Must(t, "NodePrepareResources", err)
	if len(resp.Claims) != len(claims) {
		t.Fatalf("NodePrepareResources returned %d results for %d claims", len(resp.Claims), len(claims))
	}
	return resp.Claims
}

func unprepare(t *testing.T, dra drapb.DRAPluginClient, claims ...*resourceapi.ResourceClaim) map[string]*drapb.NodeUnprepareResourceResponse {
	t.Helper()
	req := &drapb.NodeUnprepareResourcesRequest{}
	for _, c := range claims {
		req.Claims = append(req.Claims, claimRef(c))
	}
	resp, err := dra.NodeUnprepareResources(t.Context(), req)
	itest.Must(t, "NodeUnprepareResources", err)
	return resp.Claims
}

// TestPluginPrepareOverGRPC drives the plugin as the kubelet does, over its
// registration and DRA sockets, for claims allocated in the real apiserver.
func TestPluginPrepareOverGRPC(t *testing.T) {
	const nodeName = "gb200-r1-n01"
	_, admin, kubeconfig := itest.PluginEnv(t, nodeName)
	ctx := t.Context()
	p := framework.NewPlugin(t, kubeconfig, itest.GB200Fabric, nodeName)
	p.Start()
	devs := devicesOf(waitSlices(t, admin, nodeName, func(s []resourceapi.ResourceSlice) bool { return len(devicesOf(s)) == 8 }))
	domain := *devs["gpu-0"].Attributes[topology.AttrNVLinkDomain].StringValue
	dra := kubeletClients(t, p)
	outer := t // connections outlive the subtests that open them

	pg, err := admin.SchedulingV1beta1().PodGroups(metav1.NamespaceDefault).Create(ctx, itest.PodGroup(metav1.NamespaceDefault, "train", 2, "train-fabric"), metav1.CreateOptions{})
	itest.Must(t, "create pod group", err)
	group := allocated(t, admin, "train-fabric", map[string][]string{"fabric": {topology.FabricDomainPoolName(domain) + "/channel-0"}}, itest.ReservedForPodGroup(pg))
	podRef := resourceapi.ResourceClaimConsumerReference{Resource: "pods", Name: "train-0", UID: "pod-uid-0"}
	worker := allocated(t, admin, "train-0-gpus", map[string][]string{
		"gpus": {nodeName + "/gpu-0", nodeName + "/gpu-1"}, "nics": {nodeName + "/" + topology.NICDeviceName("mlx5_0")},
	}, podRef)
	thief := allocated(t, admin, "thief", map[string][]string{"gpus": {nodeName + "/gpu-1"}}, resourceapi.ResourceClaimConsumerReference{Resource: "pods", Name: "other", UID: "pod-uid-9"})

	// One batch: two good claims and one that double-books gpu-1.
	got := prepare(t, dra, group, worker, thief)
	for _, c := range []*resourceapi.ResourceClaim{group, worker} {
		if r := got[string(c.UID)]; r.Error != "" || len(r.Devices) == 0 {
			t.Errorf("prepare %s: error %q, %d devices", c.Name, r.Error, len(r.Devices))
		}
	}
	if e := got[string(thief.UID)].Error; !strings.Contains(e, "gpu-1") || !strings.Contains(e, worker.Name) {
		t.Errorf("double-booked claim: error %q, want one naming gpu-1 and %s", e, worker.Name)
	}
	spec, err := os.ReadFile(cdiSpecPath(p, worker.UID))
	itest.Must(t, "read worker CDI spec", err)
	for _, want := range []string{"GPUFABRIC_GPU_UUIDS=GPU-", "NCCL_IB_HCA==mlx5_0", "/dev/infiniband/rdma_cm",
		"/usr/lib/x86_64-linux-gnu/libcuda.so.", "/usr/bin/nvidia-smi", "update-ldcache", "NVIDIA_VISIBLE_DEVICES=void"} {
		if !strings.Contains(string(spec), want) {
			t.Errorf("worker CDI spec lacks %q:\n%s", want, spec)
		}
	}
	groupSpec, err := os.ReadFile(cdiSpecPath(p, group.UID))
	itest.Must(t, "read group CDI spec", err)
	if !strings.Contains(string(groupSpec), "GPUFABRIC_FABRIC_DOMAIN="+domain) || !strings.Contains(string(groupSpec), "NCCL_MNNVL_ENABLE=1") {
		t.Errorf("group CDI spec lacks the fabric domain settings:\n%s", groupSpec)
	}
	// Idempotent: the same answer again.
	again := prepare(t, dra, group, worker)
	if diff := cmp.Diff(deviceViews(got[string(worker.UID)]), deviceViews(again[string(worker.UID)])); diff != "" {
		t.Errorf("re-prepare changed the result (-first +second):\n%s", diff)
	}

	t.Run("restart between prepare and unprepare", func(t *testing.T) {
		p.Stop()
		p.Start()
		dra = kubeletClients(outer, p)
		if r := unprepare(t, dra, worker)[string(worker.UID)]; r.Error != "" {
			t.Fatalf("unprepare after restart: %s", r.Error)
		}
		if _, err := os.Stat(cdiSpecPath(p, worker.UID)); !os.IsNotExist(err) {
			t.Errorf("worker CDI spec still there after unprepare (err %v)", err)
		}
		// gpu-1 is free now: the other claim can have it.
		if r := prepare(t, dra, thief)[string(thief.UID)]; r.Error != "" {
			t.Errorf("prepare thief after the owner released gpu-1: %s", r.Error)
		}
		unprepare(t, dra, thief)
	})

	t.Run("corrupted checkpoint", func(t *testing.T) {
		if r := prepare(t, dra, worker)[string(worker.UID)]; r.Error != "" {
			t.Fatalf("prepare worker: %s", r.Error)
		}
		p.Stop()
		framework.WriteFile(t, filepath.Join(p.StateDir(), "checkpoint.json"), "{ this is not a checkpoint")
		p.Start()
		dra = kubeletClients(outer, p)
		moved, _ := filepath.Glob(filepath.Join(p.StateDir(), "checkpoint.json.corrupt-*"))
		if len(moved) != 1 {
			t.Errorf("corrupt checkpoint moved aside: found %v, want one file", moved)
		}
		// State was rebuilt from the CDI specs: gpu-1 is still the worker's.
		if e := prepare(t, dra, thief)[string(thief.UID)].Error; !strings.Contains(e, worker.Name) {
			t.Errorf("after recovery, double-booking gpu-1: error %q, want one naming %s", e, worker.Name)
		}
		if !eventWithReason(t, admin, nodeName, "CheckpointCorrupt") {
			t.Errorf("no CheckpointCorrupt event on node %s", nodeName)
		}
	})

	t.Run("reboot", func(t *testing.T) {
		p.Stop()
		// /var/run is a tmpfs: a reboot loses the CDI specs, and the boot id changes.
		itest.Must(t, "wipe cdi root", os.RemoveAll(p.CDIRoot()))
		framework.WriteFile(t, p.BootIDFile(), "22222222-2222-2222-2222-222222222222\n")
		p.Start()
		kubeletClients(outer, p) // serving again means recovery is done
		for _, c := range []*resourceapi.ResourceClaim{group, worker} {
			if _, err := os.Stat(cdiSpecPath(p, c.UID)); err != nil {
				t.Errorf("claim %s not re-prepared after reboot: %v", c.Name, err)
			}
		}
	})
}

// deviceViews is a comparable summary of a prepare result.
func deviceViews(r *drapb.NodePrepareResourceResponse) []string {
	var out []string
	for _, d := range r.Devices {
		out = append(out, strings.Join(d.RequestNames, ",")+" "+d.PoolName+"/"+d.DeviceName+" "+strings.Join(d.CdiDeviceIds, ","))
	}
	return out
}

func eventWithReason(t *testing.T, c kubernetes.Interface, nodeName, reason string) bool {
	t.Helper()
	events, err := c.CoreV1().Events(metav1.NamespaceDefault).List(t.Context(), metav1.ListOptions{})
	itest.Must(t, "list events", err)
	for _, e := range events.Items {
		if e.InvolvedObject.Name == nodeName && e.Reason == reason {
			return true
		}
	}
	return false
}
