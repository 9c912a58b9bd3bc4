package placement_test

import (
	"context"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/gpufabric/gpufabric/pkg/gang/placement"
	"github.com/gpufabric/gpufabric/pkg/gang/placement/extended"
	"github.com/gpufabric/gpufabric/pkg/gang/placement/index"
	"github.com/gpufabric/gpufabric/pkg/gang/placement/scenario"
	"github.com/gpufabric/gpufabric/pkg/topology"
)

// extendedPod is a pod asking gpus nvidia.com/gpu, with its special claim
// as pkg/gang/extres gives it.
func extendedPod(name string, gpus int64) placement.Member {
	p := scenario.Pod(name, "1", "1Gi")
	p.Spec.Containers[0].Resources.Requests["nvidia.com/gpu"] = *resource.NewQuantity(gpus, resource.DecimalSI)
	claim := scenario.GPUClaim(name+"-extended-resources-bcdfg", gpus)
	return placement.Member{Pod: p, Claims: []*resourceapi.ResourceClaim{claim}, Extended: &extended.Resources{
		Pod: name, Names: []v1.ResourceName{"nvidia.com/gpu"}, Classes: []string{topology.GPUDeviceClass}, Counts: []int64{gpus}, Claim: claim,
	}}
}

// TestPlaceExtendedResources: a pod asking nvidia.com/gpu, which a
// DeviceClass backs, is placed by its special claim's devices, on one
// node, though no node has nvidia.com/gpu in its allocatable; a node
// whose device plugin serves nvidia.com/gpu is not used for it; a pod
// asking more than any node has is refused, and the refusal says which
// class serves the resource.
func TestPlaceExtendedResources(t *testing.T) {
	ctx := context.Background()
	b, err := scenario.Build(scenario.Scenario{Domains: []scenario.DomainSpec{{ID: "a", Kind: string(topology.DomainKindNVSwitch), Nodes: 2, GPUsPerNode: 8}}})
	if err != nil {
		t.Fatal(err)
	}
	plugin := scenario.NodeName("a", 0) // its device plugin serves nvidia.com/gpu too
	for _, n := range b.Input.Nodes {
		if n.Name == plugin {
			n.Status.Allocatable["nvidia.com/gpu"] = resource.MustParse("8")
		}
	}
	snap, err := index.NewSnapshot(ctx, b.Config.Index, b.Input)
	if err != nil {
		t.Fatal(err)
	}
	g := &placement.Gang{Namespace: scenario.Namespace, Name: "eight", UID: "uid-eight", MinCount: 1, Members: []placement.Member{extendedPod("eight", 8)}}
	d, u, err := placement.Place(ctx, b.Config, snap, g)
	if err != nil || d == nil {
		t.Fatalf("8 GPUs not placed: %v %+v", err, u)
	}
	if want := scenario.NodeName("a", 1); d.Pods[0].Node != want || len(d.Claims) != 1 || len(d.Claims[0].Allocation.Devices.Results) != 8 {
		t.Errorf("placed on %s with claims %+v, want 8 GPUs of %s", d.Pods[0].Node, d.Claims, want)
	}
	for _, r := range d.Claims[0].Allocation.Devices.Results {
		if r.Pool != d.Pods[0].Node {
			t.Errorf("device %s/%s not on the pod's node %s", r.Pool, r.Device, d.Pods[0].Node)
		}
	}

	g = &placement.Gang{Namespace: scenario.Namespace, Name: "big", UID: "uid-big", MinCount: 1, Members: []placement.Member{extendedPod("big", 16)}}
	d, u, err = placement.Place(ctx, b.Config, snap, g)
	if err != nil || d != nil || u == nil {
		t.Fatalf("16 GPUs: decision %+v, err %v; want a refusal", d, err)
	}
	for _, want := range []string{
		"nvidia.com/gpu is served through DRA by DeviceClass gpu.gpufabric.dev (pod big asks 16): each pod's devices come from its own claim",
	} {
		if !strings.Contains(u.Message, want) {
			t.Errorf("refusal lacks %q:\n%s", want, u.Message)
		}
	}
	checks := map[string]int{}
	for _, c := range u.NodeChecks {
		checks[c.Check] = c.Nodes
	}
	if checks[extended.CheckDevicePlugin+" (nvidia.com/gpu)"] != 1 || checks["insufficient nvidia.com/gpu"] != 0 {
		t.Errorf("node checks %+v, want the device plugin's node refused by %q and no node short of nvidia.com/gpu", u.NodeChecks, extended.CheckDevicePlugin)
	}
}
