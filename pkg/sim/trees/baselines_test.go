package trees

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpufabric/gpufabric/pkg/topology"
)

// TestBaselines places trees with Kube and Kueue on tiny fabrics; every
// expected node is worked out by hand in the case's comment.
func TestBaselines(t *testing.T) {
	nvl := topology.TopologyKeyNVLinkDomain
	tests := []struct {
		name  string
		racks []rack
		busy  map[string]int
		tree  Spec
		kube  []string // nil: refused
		kueue []string
	}{{
		// Rack A: 8 nodes, 4 of them full (16 GPUs used, 16 free); B: 2
		// free nodes. Kube places pg1 (one node) where the rack is most
		// allocated after it, A (20/32 against 4/8), and then pg2 (four
		// nodes) fits in neither rack: the greedy sibling order dead-ends
		// where pg1 in B and pg2 in A fit. Kueue cannot express the
		// children (of different sizes): one flat group in the leaf,
		// BestFit, node by node in order, pg2 across both racks.
		name:  "kube's greedy sibling order dead-ends, Kueue ignores the children's keys",
		racks: []rack{{"a", "l0", 8, 4}, {"b", "l0", 2, 4}},
		busy:  map[string]int{"a-n0": 4, "a-n1": 4, "a-n2": 4, "a-n3": 4},
		tree: Spec{Kind: KindTraining, Name: "job", TopologyKey: "leaf", Children: []Spec{
			leafSpec("pg1", "rack", 1, 4), leafSpec("pg2", "rack", 4, 4)}},
		kube:  nil,
		kueue: []string{"a-n4", "a-n5", "a-n6", "a-n7", "b-n0"},
	}, {
		// A has 2 of 4 nodes free, B 4. Kube: s0 goes to the rack most
		// allocated after it (A: 16/16), s1 to B; per pod the most
		// allocated node. Kueue: two slices of 2 pods; A holds 1 slice,
		// B 2: BestFit takes the tightest rack that holds both, B.
		name:  "segments: kube fills the fuller rack first, Kueue puts both slices in the rack that holds them",
		racks: []rack{{"a", "l0", 4, 4}, {"b", "l0", 4, 4}},
		busy:  map[string]int{"a-n0": 4, "a-n1": 4},
		tree: Spec{Kind: KindTraining, Name: "job", TopologyKey: "leaf", Children: []Spec{
			leafSpec("s0", nvl, 2, 4), leafSpec("s1", nvl, 2, 4)}},
		kube:  []string{"a-n2", "a-n3", "b-n0", "b-n1"},
		kueue: []string{"b-n0", "b-n1", "b-n2", "b-n3"},
	}, {
		// Leaf l0 has one free node, l1 four: both baselines take the
		// fuller leaf (kube: most allocated after, 16/16; Kueue: fewest
		// slices that fit, 1).
		name:  "the root's domain: the fullest that fits",
		racks: []rack{{"a", "l0", 4, 4}, {"b", "l1", 4, 4}},
		busy:  map[string]int{"a-n0": 4, "a-n1": 4, "a-n2": 4},
		tree: Spec{Kind: KindTraining, Name: "job", TopologyKey: "leaf", Children: []Spec{
			leafSpec("s0", nvl, 1, 4)}},
		kube:  []string{"a-n3"},
		kueue: []string{"a-n3"},
	}, {
		// A service in one NVLink domain (read as the rack): frontend
		// without GPUs, prefill and decode 2 pods of 2 GPUs. Rack A (a-n0
		// half busy) has 6 free GPUs but only three 2-GPU slots: both
		// baselines fail there and fill B: the frontend and prefill on
		// b-n0, decode on b-n1.
		name:  "a service: both baselines place it in the rack where all its pods fit",
		racks: []rack{{"a", "l0", 2, 4}, {"b", "l0", 2, 4}},
		busy:  map[string]int{"a-n0": 2},
		tree: Spec{Kind: KindInference, Name: "svc", TopologyKey: nvl, Children: []Spec{
			{Name: "frontend", Role: RoleFrontend, Pods: 1},
			{Name: "prefill", Role: RolePrefill, Pods: 2, GPUsPerPod: 2, RailGroup: "kv"},
			{Name: "decode", Role: RoleDecode, Pods: 2, GPUsPerPod: 2, RailGroup: "kv"}}},
		kube:  []string{"b-n0", "b-n0", "b-n0", "b-n1", "b-n1"},
		kueue: []string{"b-n0", "b-n0", "b-n0", "b-n1", "b-n1"},
	}, {
		name:  "nothing fits: both refuse",
		racks: []rack{{"a", "l0", 2, 4}},
		tree: Spec{Kind: KindTraining, Name: "job", TopologyKey: "leaf", Children: []Spec{
			leafSpec("s0", nvl, 2, 4), leafSpec("s1", nvl, 1, 4)}},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			topo, names := racksOf(tc.racks...)
			free := freeOf(topo, names, tc.busy)
			s := mustValid(t, &tc.tree)
			kube, err := Kube(topo, free, s)
			if err != nil {
				t.Fatal(err)
			}
			kueue, err := Kueue(topo, free, s)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.kube, named(names, kube)); diff != "" {
				t.Errorf("kube (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.kueue, named(names, kueue)); diff != "" {
				t.Errorf("kueue (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(freeOf(topo, names, tc.busy), free); diff != "" {
				t.Errorf("free GPUs changed (-before +after):\n%s", diff)
			}
		})
	}
}

// TestKueueSlices is the KEP-2724 example of two-level BestFit: one rack
// of nodes that hold 6, 5, 4, 3 and 2 pods, slices of 2 pods each in one
// host, 12 pods: 6 on the first node, 4 on the third, 2 on the last.
func TestKueueSlices(t *testing.T) {
	var nodes []node
	var names []string
	for i, g := range []int{6, 5, 4, 3, 2} {
		h := string(rune('p' + i))
		nodes = append(nodes, node{gpus: g, at: []string{h, h, "r0"}})
		names = append(names, h)
	}
	topo := topoOf([]string{topology.TopologyKeyNVLinkDomain, "host", "rack"}, nodes)
	s := &Spec{Kind: KindTraining, Name: "job", TopologyKey: "rack"}
	for i := range 6 {
		s.Children = append(s.Children, leafSpec(string(rune('a'+i)), "host", 2, 1))
	}
	got, err := Kueue(topo, topo.GPUs, mustValid(t, s))
	if err != nil {
		t.Fatal(err)
	}
	want := append(append(repeat("p", 6), repeat("r", 4)...), repeat("t", 2)...)
	if diff := cmp.Diff(want, named(names, got)); diff != "" {
		t.Errorf("pods (-want +got):\n%s", diff)
	}
}

func TestLabelLevel(t *testing.T) {
	nvl := topology.TopologyKeyNVLinkDomain
	racks, _ := racksOf(rack{"a", "l0", 2, 4}, rack{"b", "l0", 2, 4})
	// HGX-like: every node its own NVLink domain, two nodes per rack.
	hgx := topoOf([]string{nvl, "rack", "leaf"}, []node{
		{8, []string{"n0", "r0", "l0"}}, {8, []string{"n1", "r0", "l0"}}, {8, []string{"n2", "r1", "l0"}}})
	tests := []struct {
		name    string
		t       *Topology
		key     string
		want    int
		wantErr bool
	}{
		{"a label level is itself", racks, "leaf", 2, false},
		{"the NVLink domain is the rack when racks are NVLink domains", racks, nvl, 1, false},
		{"else the innermost label level", hgx, nvl, 1, false},
		{"an unknown key", racks, "zone", 0, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.t.LabelLevel(tc.key)
			if (err != nil) != tc.wantErr || got != tc.want {
				t.Errorf("LabelLevel(%q) = %d, %v; want %d, error %v", tc.key, got, err, tc.want, tc.wantErr)
			}
		})
	}
}

// TestKubeFits: kube's rule is checked only where the node labels it reads
// are the tree's levels.
func TestKubeFits(t *testing.T) {
	nvl := topology.TopologyKeyNVLinkDomain
	seg := &Spec{Kind: KindTraining, Name: "job", TopologyKey: "leaf", Children: []Spec{leafSpec("s0", nvl, 1, 8)}}
	racks, names := racksOf(rack{"a", "l0", 2, 8})
	hgx := topoOf([]string{nvl, "rack", "leaf"}, []node{{8, []string{"n0", "r0", "l0"}}, {8, []string{"n1", "r0", "l0"}}})
	if !KubeFits(racks, freeOf(racks, names, nil), seg) {
		t.Error("racks that are NVLink domains: kube's rule places the segment, KubeFits says no")
	}
	if KubeFits(racks, freeOf(racks, names, map[string]int{"a-n0": 8, "a-n1": 8}), seg) {
		t.Error("a full rack: KubeFits says yes")
	}
	if KubeFits(hgx, hgx.GPUs, seg) {
		t.Error("HGX: the rack only stands for the NVLink domain, KubeFits says yes")
	}
	svc := &Spec{Kind: KindInference, Name: "svc", TopologyKey: nvl, Children: []Spec{
		{Name: "p", Pods: 1, GPUsPerPod: 2, RailGroup: "kv"}, {Name: "d", Pods: 1, GPUsPerPod: 2, RailGroup: "kv"}}}
	if KubeFits(racks, freeOf(racks, names, nil), svc) {
		t.Error("a required rail coupling, which kube cannot ask for: KubeFits says yes")
	}
	svc.RailCoupling = CouplingPreferred
	if !KubeFits(racks, freeOf(racks, names, nil), svc) {
		t.Error("a preferred rail coupling: KubeFits says no")
	}
}
