package index_test

import (
	"context"
	"testing"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"

	"github.com/gpufabric/gpufabric/pkg/gang/placement/index"
	"github.com/gpufabric/gpufabric/pkg/gang/placement/scenario"
	"github.com/gpufabric/gpufabric/pkg/topology"
)

// TestShapeKey: nodes whose devices differ only by values (their NVLink
// domain) or by what is allocated share a shape; a node with another
// attribute set, another count or a tainted device does not. Content keys
// (FreeDeviceKey) tell the first two apart.
func TestShapeKey(t *testing.T) {
	ctx := context.Background()
	gpus := func(domain string, rail int64, taint string) []scenario.GPU {
		out := make([]scenario.GPU, 4)
		for i := range out {
			out[i] = scenario.GPU{NVLinkDomain: domain, Kind: topology.DomainKindNVSwitch, Rail: rail, Taint: taint}
		}
		return out
	}
	in := index.SnapshotInput{DeviceClasses: scenario.DeviceClasses()}
	for _, n := range []struct {
		name string
		gpus []scenario.GPU
	}{
		{"a", gpus("da", 0, "")},
		{"b", gpus("db", 0, "")},  // other values
		{"c", gpus("dc", -1, "")}, // no ibRail attribute
		{"d", gpus("dd", 0, "")[:3]},
		{"e", gpus("de", 0, "bad")},
		{"f", gpus("df", 0, "")}, // one GPU allocated
	} {
		in.Nodes = append(in.Nodes, scenario.Node(n.name, "8", "8Gi", nil))
		in.ResourceSlices = append(in.ResourceSlices, scenario.GPUSlice(n.name, n.gpus))
	}
	in.ResourceClaims = []*resourceapi.ResourceClaim{scenario.AllocatedClaim("used", "f", topology.GPUDeviceName(0))}
	s, err := index.NewSnapshot(ctx, index.Config{}, in)
	if err != nil {
		t.Fatal(err)
	}
	key := func(node string) (string, string) {
		classes := []string{topology.GPUDeviceClass}
		sh, err := s.ShapeKey(ctx, s.Node(node), classes)
		if err != nil {
			t.Fatal(err)
		}
		content, err := s.FreeDeviceKey(ctx, s.Node(node), classes, nil)
		if err != nil {
			t.Fatal(err)
		}
		return sh, content
	}
	a, ac := key("a")
	for _, tc := range []struct {
		node        string
		sameShape   bool
		sameContent bool
	}{
		{"b", true, false}, {"f", true, false}, {"c", false, false}, {"d", false, false}, {"e", false, false},
	} {
		sh, content := key(tc.node)
		if (sh == a) != tc.sameShape || (content == ac) != tc.sameContent {
			t.Errorf("node %s: same shape %v, same content %v; want %v, %v", tc.node, sh == a, content == ac, tc.sameShape, tc.sameContent)
		}
	}
}

// TestAllocatorKey: the key changes with a DeviceClass's spec and with the
// allocator's timeout, not with the nodes.
func TestAllocatorKey(t *testing.T) {
	ctx := context.Background()
	build := func(cfg index.Config, classes []*resourceapi.DeviceClass, nodes ...string) string {
		in := index.SnapshotInput{DeviceClasses: classes}
		for _, n := range nodes {
			in.Nodes = append(in.Nodes, &v1.Node{})
			in.Nodes[len(in.Nodes)-1].Name = n
		}
		s, err := index.NewSnapshot(ctx, cfg, in)
		if err != nil {
			t.Fatal(err)
		}
		k, err := s.AllocatorKey()
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	base := build(index.Config{}, scenario.DeviceClasses(), "n0")
	changed := scenario.DeviceClasses()
	changed[0].Spec.Selectors[0].CEL.Expression += " && true"
	for name, k := range map[string]string{
		"class changed":   build(index.Config{}, changed, "n0"),
		"timeout changed": build(index.Config{AllocateTimeout: 7}, scenario.DeviceClasses(), "n0"),
	} {
		if k == base {
			t.Errorf("%s: same allocator key", name)
		}
	}
	if build(index.Config{}, scenario.DeviceClasses(), "n0", "n1") != base {
		t.Error("nodes changed the allocator key")
	}
}
