package freeroom

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	corelisters "k8s.io/client-go/listers/core/v1"
	resourcelisters "k8s.io/client-go/listers/resource/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/gpufabric/gpufabric/pkg/gang/placement/spares"
	"github.com/gpufabric/gpufabric/pkg/topology"
)

// spareCluster is one NVLink domain dom-a of four 4-GPU nodes a-0…a-3 in
// listers: a claim holds GPU 0 of a-3, and a-1 is cordoned.
func spareCluster(t *testing.T) (*topology.Tree, *ListerGPUs) {
	t.Helper()
	nodes := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	slices := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	claims := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	var ns []*corev1.Node
	var ss []*resourceapi.ResourceSlice
	for _, name := range []string{"a-0", "a-1", "a-2", "a-3"} {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.NodeSpec{Unschedulable: name == "a-1"}}
		s := &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: resourceapi.ResourceSliceSpec{Driver: topology.DriverName, NodeName: ptr.To(name),
				Pool: resourceapi.ResourcePool{Name: name, ResourceSliceCount: 1}}}
		for i := range 4 {
			s.Spec.Devices = append(s.Spec.Devices, resourceapi.Device{Name: topology.GPUDeviceName(i),
				Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
					topology.AttrType:         {StringValue: ptr.To(topology.DeviceTypeGPU)},
					topology.AttrNVLinkDomain: {StringValue: ptr.To("dom-a")},
				}})
		}
		ns, ss = append(ns, n), append(ss, s)
		if err := nodes.Add(n); err != nil {
			t.Fatal(err)
		}
		if err := slices.Add(s); err != nil {
			t.Fatal(err)
		}
	}
	held := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "t", Name: "c"},
		Status: resourceapi.ResourceClaimStatus{Allocation: &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{
			Results: []resourceapi.DeviceRequestAllocationResult{{Driver: topology.DriverName, Pool: "a-3", Device: topology.GPUDeviceName(0)}}}}}}
	if err := claims.Add(held); err != nil {
		t.Fatal(err)
	}
	tree, err := topology.BuildTree(topology.TreeConfig{}, ns, ss)
	if err != nil {
		t.Fatal(err)
	}
	return tree, &ListerGPUs{Nodes: corelisters.NewNodeLister(nodes), Slices: resourcelisters.NewResourceSliceLister(slices),
		Claims: resourcelisters.NewResourceClaimLister(claims)}
}

// TestSparesNotFreeRoom: the kept spares' GPUs are taken off the free
// ones and summed; a cordoned or partly held node is no spare; a domain
// with fewer wholly free nodes than asked is counted short; with
// --spares-for-new-gangs (or no policy) the view is as before.
func TestSparesNotFreeRoom(t *testing.T) {
	tree, src := spareCluster(t)
	cases := []struct {
		name     string
		policy   spares.Policy
		wantFree int
		want     *Spares
	}{
		{"none", spares.Policy{}, 15, nil},
		{"one kept", spares.Policy{PerDomain: 1}, 11, &Spares{PerDomain: 1, Level: topology.TopologyKeyNVLinkDomain, KeptNodes: 1, KeptGPUs: 4}},
		{"short", spares.Policy{PerDomain: 3}, 7, &Spares{PerDomain: 3, Level: topology.TopologyKeyNVLinkDomain, KeptNodes: 2, KeptGPUs: 8, DomainsShort: 1}},
		{"for new gangs", spares.Policy{PerDomain: 1, ForNewGangs: true}, 15, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := &publisher{cfg: Config{Client: fake.NewClientset(), Namespace: "gpufabric-system", Changes: func() uint64 { return 0 },
				FreeGPUs: func() (map[string]int, error) { return map[string]int{"dom-a": 15}, nil },
				Tree:     &source{tree: tree}, Spares: tc.policy, NodeGPUs: src, Now: time.Now}}
			if err := p.step(context.Background(), 0); err != nil {
				t.Fatal(err)
			}
			v := p.written
			if v.FreeGPUs != tc.wantFree || v.Levels[0].FreeGPUs != tc.wantFree {
				t.Errorf("free GPUs: cluster %d, NVLink level %d, want %d", v.FreeGPUs, v.Levels[0].FreeGPUs, tc.wantFree)
			}
			if (v.Spares == nil) != (tc.want == nil) || v.Spares != nil && *v.Spares != *tc.want {
				t.Errorf("spares %+v, want %+v", v.Spares, tc.want)
			}
		})
	}
}
