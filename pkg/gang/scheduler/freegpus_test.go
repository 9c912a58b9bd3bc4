package scheduler

import (
	"github.com/gpufabric/gpufabric/pkg/gang/assume"
	"github.com/gpufabric/gpufabric/pkg/gang/placement/scenario"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	resourcelisters "k8s.io/client-go/listers/resource/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/gpufabric/gpufabric/pkg/gang/placement"
	"github.com/gpufabric/gpufabric/pkg/gang/placement/index"
)

// TestFreeGPUs: the free-GPU gauges count the same with the placement
// cache as by listing the informers (Config.RebuildSnapshots): claims'
// devices and an assumed decision's are taken once, admin access takes
// nothing, and a domain with none free is listed at 0.
func TestFreeGPUs(t *testing.T) {
	gpus := func(domain string, n int) []scenario.GPU {
		out := make([]scenario.GPU, n)
		for i := range out {
			out[i] = scenario.GPU{NVLinkDomain: domain, Rail: -1}
		}
		return out
	}
	admin := func(rc *resourceapi.ResourceClaim) *resourceapi.ResourceClaim {
		yes := true
		rc.Status.Allocation.Devices.Results[0].AdminAccess = &yes
		return rc
	}
	slices := []*resourceapi.ResourceSlice{
		scenario.GPUSlice("a", gpus("nvl0", 4)), scenario.GPUSlice("b", gpus("nvl0", 4)),
		scenario.GPUSlice("c", gpus("nvl1", 1)),
	}
	claims := []*resourceapi.ResourceClaim{
		scenario.AllocatedClaim("held", "a", "gpu-0"),
		admin(scenario.AllocatedClaim("admin", "b", "gpu-1")),
		scenario.AllocatedClaim("full", "c", "gpu-0"),
	}
	// The assumed decision: a/gpu-0 (already held), a/gpu-1, and b/gpu-2
	// with admin access.
	pending := scenario.Pod("p0", "1", "1Gi")
	decided := scenario.AllocatedClaim("decided", "a", "gpu-0", "gpu-1")
	decidedAdmin := admin(scenario.AllocatedClaim("decided-admin", "b", "gpu-2"))
	decision := &placement.Decision{
		Pods: []placement.PodPlacement{{Namespace: pending.Namespace, Name: pending.Name, UID: pending.UID, Node: "a"}},
		Claims: []placement.ClaimAllocation{
			{Namespace: decided.Namespace, Name: decided.Name, UID: decided.UID, Allocation: *decided.Status.Allocation},
			{Namespace: decided.Namespace, Name: decidedAdmin.Name, UID: decidedAdmin.UID, Allocation: *decidedAdmin.Status.Allocation},
		},
	}
	want := map[string]int{"nvl0": 6, "nvl1": 0}
	for _, cached := range []bool{true, false} {
		sn := listerSnapshots(t, cached, pending, slices, claims)
		// The pod is not bound yet: the entry stays pending.
		sn.assumed.AddInFlight("ns/g", assume.Part{Decision: decision})
		sn.assumed.Complete("ns/g", nil)
		got, err := sn.freeGPUs()
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("cache %v: free GPUs (-want +got):\n%s", cached, diff)
		}
		if sn.assumed.Len() != 1 {
			t.Errorf("cache %v: the assumed entry was dropped", cached)
		}
	}
}

// listerSnapshots returns snapshots whose listers hold the objects (and
// node "a"); with cached, a placement cache given the slices and claims
// too.
func listerSnapshots(t *testing.T, cached bool, pod *v1.Pod, slices []*resourceapi.ResourceSlice, claims []*resourceapi.ResourceClaim) *snapshots {
	t.Helper()
	idx := func(objs ...any) cache.Indexer {
		i := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
		for _, o := range objs {
			if err := i.Add(o); err != nil {
				t.Fatal(err)
			}
		}
		return i
	}
	var sls, rcs []any
	for _, sl := range slices {
		sls = append(sls, sl)
	}
	for _, rc := range claims {
		rcs = append(rcs, rc)
	}
	sn := &snapshots{
		assumed: assume.New(),
		pods:    corelisters.NewPodLister(idx(pod)),
		claims:  resourcelisters.NewResourceClaimLister(idx(rcs...)),
		slices:  resourcelisters.NewResourceSliceLister(idx(sls...)),
		classes: resourcelisters.NewDeviceClassLister(idx()),
		nodes:   corelisters.NewNodeLister(idx(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "a"}})),
	}
	sn.shown = &assume.Shown{Pods: sn.pods, Nodes: sn.nodes, Claims: sn.claims}
	if cached {
		sn.cache = index.NewCache(index.Config{})
		sn.shown.Cache = sn.cache
		for _, sl := range slices {
			sn.cache.SetSlice(sl)
		}
		for _, rc := range claims {
			sn.cache.SetClaim(rc)
		}
	}
	return sn
}
