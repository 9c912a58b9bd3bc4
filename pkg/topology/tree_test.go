package topology

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func strp(s string) *string { return &s }
func intp(i int64) *int64   { return &i }

func testNode(name string, labels map[string]string) *v1.Node {
	return &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
}

func gpuSlice(node string, gen int64, domains ...string) *resourceapi.ResourceSlice {
	s := &resourceapi.ResourceSlice{Spec: resourceapi.ResourceSliceSpec{
		Driver: DriverName, NodeName: strp(node),
		Pool: resourceapi.ResourcePool{Name: node, Generation: gen, ResourceSliceCount: 1},
	}}
	for i, d := range domains {
		s.Spec.Devices = append(s.Spec.Devices, resourceapi.Device{
			Name: GPUDeviceName(i),
			Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
				AttrType: {StringValue: strp(DeviceTypeGPU)}, AttrNVLinkDomain: {StringValue: strp(d)}, AttrIBRail: {IntValue: intp(int64(i))},
			},
		})
	}
	// A NIC never counts as a GPU.
	s.Spec.Devices = append(s.Spec.Devices, resourceapi.Device{Name: NICDeviceName("mlx5_0"), Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{AttrType: {StringValue: strp(DeviceTypeNIC)}}})
	return s
}

// domainView is a comparable summary of a domain.
type domainView struct {
	ID       string
	Nodes    []string
	GPUs     int
	Parent   string
	Children []string
}

func view(t *Tree) map[string][]domainView {
	out := map[string][]domainView{}
	for _, l := range t.Levels {
		for _, d := range l.Domains {
			v := domainView{ID: d.ID, Nodes: d.Nodes, GPUs: d.GPUs}
			if d.Parent != nil {
				v.Parent = d.Parent.Key + "=" + d.Parent.ID
			}
			for _, c := range d.Children {
				v.Children = append(v.Children, c.ID)
			}
			out[l.Key] = append(out[l.Key], v)
		}
	}
	return out
}

func TestBuildTree(t *testing.T) {
	rackA := map[string]string{"rack": "a", "leaf": "l1"}
	rackB := map[string]string{"rack": "b", "leaf": "l1"}
	tests := map[string]struct {
		cfg          TreeConfig
		nodes        []*v1.Node
		slices       []*resourceapi.ResourceSlice
		want         map[string][]domainView
		wantWarnings int
		wantErr      bool
	}{
		"nvl domains under racks under a leaf": {
			cfg:   TreeConfig{LabelLevels: []string{"rack", "leaf"}},
			nodes: []*v1.Node{testNode("n2", rackB), testNode("n1", rackA), testNode("n0", rackA), testNode("cpu", map[string]string{"rack": "b"})},
			slices: []*resourceapi.ResourceSlice{
				gpuSlice("n0", 1, "x", "x"), gpuSlice("n1", 1, "x", "x"), gpuSlice("n2", 1, "y", "y", "y", "y"),
				gpuSlice("n2", 0, "stale"), // older generation: ignored
			},
			want: map[string][]domainView{
				TopologyKeyNVLinkDomain: {
					{ID: "none.cpu", Nodes: []string{"cpu"}, Parent: "rack=b"},
					{ID: "x", Nodes: []string{"n0", "n1"}, GPUs: 4, Parent: "rack=a"},
					{ID: "y", Nodes: []string{"n2"}, GPUs: 4, Parent: "rack=b"},
				},
				"rack": {
					{ID: "a", Nodes: []string{"n0", "n1"}, GPUs: 4, Parent: "leaf=l1", Children: []string{"x"}},
					{ID: "b", Nodes: []string{"cpu", "n2"}, GPUs: 4, Parent: TopologyKeyCluster + "=cluster", Children: []string{"none.cpu", "y"}},
				},
				"leaf":             {{ID: "l1", Nodes: []string{"n0", "n1", "n2"}, GPUs: 8, Parent: TopologyKeyCluster + "=cluster", Children: []string{"a"}}},
				TopologyKeyCluster: {{ID: "cluster", Nodes: []string{"cpu", "n0", "n1", "n2"}, GPUs: 8, Children: []string{"b", "l1"}}},
			},
			// rack b: cpu has no leaf label while n2 has one.
			wantWarnings: 1,
		},
		"gpus disagree on domain": {
			nodes:  []*v1.Node{testNode("n0", nil)},
			slices: []*resourceapi.ResourceSlice{gpuSlice("n0", 1, "b", "a")},
			want: map[string][]domainView{
				TopologyKeyNVLinkDomain: {{ID: "a", Nodes: []string{"n0"}, GPUs: 2, Parent: TopologyKeyCluster + "=cluster"}},
				TopologyKeyCluster:      {{ID: "cluster", Nodes: []string{"n0"}, GPUs: 2, Children: []string{"a"}}},
			},
			wantWarnings: 1,
		},
		"reserved level":  {cfg: TreeConfig{LabelLevels: []string{TopologyKeyNVLinkDomain}}, wantErr: true},
		"repeated level":  {cfg: TreeConfig{LabelLevels: []string{"rack", "rack"}}, wantErr: true},
		"empty level key": {cfg: TreeConfig{LabelLevels: []string{""}}, wantErr: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			tree, err := BuildTree(tc.cfg, tc.nodes, tc.slices)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, want error %v", err, tc.wantErr)
			}
			if err != nil {
				return
			}
			if diff := cmp.Diff(tc.want, view(tree)); diff != "" {
				t.Errorf("tree (-want +got):\n%s", diff)
			}
			if len(tree.Warnings) != tc.wantWarnings {
				t.Errorf("warnings = %q, want %d", tree.Warnings, tc.wantWarnings)
			}
		})
	}
}

func TestLevelLookups(t *testing.T) {
	nodes := []*v1.Node{testNode("n0", map[string]string{"zone": "z1"}), testNode("n1", nil)}
	tree, err := BuildTree(TreeConfig{}, nodes, []*resourceapi.ResourceSlice{gpuSlice("n0", 1, "x")})
	if err != nil {
		t.Fatal(err)
	}
	if l := tree.Level(TopologyKeyNVLinkDomain); l == nil || l.DomainOf("n0").ID != "x" || l.Domain("x").GPUs != 1 {
		t.Errorf("level 0 lookups wrong: %+v", l)
	}
	if tree.Level("zone") != nil {
		t.Errorf("zone is not a configured level")
	}
	zone := tree.NewLabelLevel("zone", nodes)
	if diff := cmp.Diff([]string{"n0"}, zone.Domain("z1").Nodes); diff != "" || zone.Index != -1 || zone.DomainOf("n1") != nil {
		t.Errorf("ad-hoc level wrong (-want +got):\n%s", diff)
	}
	if got := tree.NodeGPUCount("n0"); got != 1 {
		t.Errorf("NodeGPUCount = %d, want 1", got)
	}
}
