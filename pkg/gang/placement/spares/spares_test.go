package spares

import (
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"

	"github.com/gpufabric/gpufabric/pkg/topology"
)

func device(typ string, taint bool) *resourceapi.Device {
	d := &resourceapi.Device{Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{topology.AttrType: {StringValue: &typ}}}
	if taint {
		d.Taints = []resourceapi.DeviceTaint{{Key: "gpufabric.dev/xid", Effect: resourceapi.DeviceTaintEffectNoExecute}}
	}
	return d
}

// TestNodeGPUs: a node is wholly free with GPUs, none held (an allocated
// MIG partition holds its GPU), no tainted GPU, and usable.
func TestNodeGPUs(t *testing.T) {
	for _, tc := range []struct {
		name string
		node *v1.Node
		devs []*resourceapi.Device
		held []bool
		want bool
	}{
		{name: "free", node: &v1.Node{}, devs: []*resourceapi.Device{device("gpu", false), device("nic", false)}, held: []bool{false, true}, want: true},
		{name: "no GPUs", node: &v1.Node{}, devs: []*resourceapi.Device{device("nic", false)}, held: []bool{false}},
		{name: "GPU held", node: &v1.Node{}, devs: []*resourceapi.Device{device("gpu", false), device("gpu", false)}, held: []bool{false, true}},
		{name: "MIG held", node: &v1.Node{}, devs: []*resourceapi.Device{device("gpu", false), device("mig", false)}, held: []bool{false, true}},
		{name: "GPU tainted", node: &v1.Node{}, devs: []*resourceapi.Device{device("gpu", true)}, held: []bool{false}},
		{name: "cordoned", node: &v1.Node{Spec: v1.NodeSpec{Unschedulable: true}}, devs: []*resourceapi.Device{device("gpu", false)}, held: []bool{false}},
		{name: "not ready", node: &v1.Node{Spec: v1.NodeSpec{Taints: []v1.Taint{{Key: v1.TaintNodeNotReady, Effect: v1.TaintEffectNoExecute}}}}, devs: []*resourceapi.Device{device("gpu", false)}, held: []bool{false}},
		{name: "tenant taint", node: &v1.Node{Spec: v1.NodeSpec{Taints: []v1.Taint{{Key: "team", Effect: v1.TaintEffectNoSchedule}}}}, devs: []*resourceapi.Device{device("gpu", false)}, held: []bool{false}, want: true},
	} {
		n := NodeGPUs{Usable: UsableNode(tc.node)}
		for i, d := range tc.devs {
			n.AddDevice(d, tc.held[i])
		}
		if got := n.WhollyFree(); got != tc.want {
			t.Errorf("%s: wholly free %v, want %v (%+v)", tc.name, got, tc.want, n)
		}
	}
}

// TestCountDomain keeps the last PerDomain wholly free nodes by name and
// counts the missing ones.
func TestCountDomain(t *testing.T) {
	free := map[string]bool{"n1": true, "n3": true, "n4": true}
	gpus := func(n string) NodeGPUs {
		return NodeGPUs{GPUs: 4, Usable: true, Held: map[bool]int{true: 0, false: 1}[free[n]]}
	}
	d := &topology.Domain{ID: "a", Nodes: []string{"n1", "n2", "n3", "n4"}}
	c := CountDomain(d, 2, gpus)
	if strings.Join(c.Kept, ",") != "n3,n4" || c.KeptGPUs != 8 || c.Missing != 0 || len(c.Free) != 3 {
		t.Errorf("count %+v", c)
	}
	c = CountDomain(d, 5, gpus)
	if len(c.Kept) != 3 || c.Missing != 2 {
		t.Errorf("count with 5 asked: %+v", c)
	}
}

func TestKeptText(t *testing.T) {
	for _, tc := range []struct {
		free, kept int
		want       string
	}{
		{1, 1, "its 1 free node is a spare kept for replacements"},
		{2, 2, "its 2 free nodes are spares kept for replacements"},
		{5, 1, "1 of its 5 free nodes is a spare kept for replacements"},
		{5, 2, "2 of its 5 free nodes are spares kept for replacements"},
	} {
		if got := keptText(Domain{Free: make([]string, tc.free), Kept: make([]string, tc.kept)}); got != tc.want {
			t.Errorf("%d of %d: %q, want %q", tc.kept, tc.free, got, tc.want)
		}
	}
}

func TestPolicy(t *testing.T) {
	if (Policy{PerDomain: 2, ForNewGangs: true}).On() || (Policy{}).On() || !(Policy{PerDomain: 1}).On() {
		t.Error("On")
	}
	if (Policy{}).Key() != topology.TopologyKeyNVLinkDomain {
		t.Error("default level")
	}
	if err := (Policy{PerDomain: MaxPerDomain + 1}).Validate(nil); err == nil {
		t.Error("too many accepted")
	}
	if err := (Policy{PerDomain: 1, Level: "rack"}).Validate([]string{"rack"}); err != nil {
		t.Error(err)
	}
}
