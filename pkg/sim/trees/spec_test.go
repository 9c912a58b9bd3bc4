package trees

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpufabric/gpufabric/pkg/topology"
)

func TestValidate(t *testing.T) {
	deep := Spec{Name: "l4", Pods: 1, GPUsPerPod: 1}
	for i := 3; i >= 0; i-- {
		deep = Spec{Name: "c" + string(rune('0'+i)), Children: []Spec{deep}}
	}
	deep.Kind = KindTraining
	wide := Spec{Kind: KindTraining, Name: "w"}
	for i := range MaxChildren + 1 {
		wide.Children = append(wide.Children, Spec{Name: "x" + strings.Repeat("x", i), Pods: 1, GPUsPerPod: 1})
	}
	tests := []struct {
		name string
		s    Spec
		want string // "" valid, else a part of the error
	}{
		{"a training job", Spec{Kind: KindTraining, Name: "job", TopologyKey: "leaf", Children: []Spec{leafSpec("s0", "rack", 2, 4)}}, ""},
		{"a CPU-only leaf beside GPUs", Spec{Kind: KindInference, Name: "svc", Children: []Spec{{Name: "f", Pods: 1}, leafSpec("p", "", 1, 1)}}, ""},
		{"no kind", Spec{Name: "job", Pods: 1, GPUsPerPod: 1}, "kind"},
		{"a kind below the root", Spec{Kind: KindTraining, Name: "job", Children: []Spec{{Kind: KindTraining, Name: "s", Pods: 1, GPUsPerPod: 1}}}, "root only"},
		{"names repeat", Spec{Kind: KindTraining, Name: "job", Children: []Spec{leafSpec("s", "", 1, 1), leafSpec("s", "", 1, 1)}}, "unique"},
		{"too deep", deep, "deeper"},
		{"too wide", wide, "children"},
		{"a composite with pods", Spec{Kind: KindTraining, Name: "job", Pods: 2, Children: []Spec{leafSpec("s", "", 1, 1)}}, "composite"},
		{"a leaf without pods", Spec{Kind: KindTraining, Name: "job", Children: []Spec{leafSpec("s", "", 0, 1)}}, "pods"},
		{"too many GPUs per pod", Spec{Kind: KindTraining, Name: "job", Children: []Spec{leafSpec("s", "", 1, MaxGPUsPerPod+1)}}, "pods of"},
		{"too many pods in all", Spec{Kind: KindTraining, Name: "job", Children: []Spec{leafSpec("a", "", MaxPods, 1), leafSpec("b", "", 1, 1)}}, "at most"},
		{"no GPU at all", Spec{Kind: KindInference, Name: "svc", Children: []Spec{{Name: "f", Pods: 1}}}, "a GPU"},
		{"a preferred coupling", Spec{Kind: KindInference, Name: "svc", RailCoupling: CouplingPreferred, Children: []Spec{
			{Name: "p", Pods: 1, GPUsPerPod: 1, RailGroup: "kv"}, {Name: "d", Pods: 1, GPUsPerPod: 1, RailGroup: "kv"}}}, ""},
		{"an unknown coupling", Spec{Kind: KindInference, Name: "svc", RailCoupling: "always", Children: []Spec{leafSpec("p", "", 1, 1)}}, "railCoupling"},
		{"a coupling on a leaf", Spec{Kind: KindInference, Name: "svc", Children: []Spec{{Name: "p", Pods: 1, GPUsPerPod: 1, RailCoupling: CouplingRequired}}}, "railCoupling"},
		{"two rail groups under one composite", Spec{Kind: KindInference, Name: "svc", Children: []Spec{
			{Name: "p", Pods: 1, GPUsPerPod: 1, RailGroup: "a"}, {Name: "d", Pods: 1, GPUsPerPod: 1, RailGroup: "b"}}}, "rail groups"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.s.Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("unexpected error: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("error %v, want one with %q", err, tc.want)
			}
		})
	}
}

func TestFlat(t *testing.T) {
	s := Spec{Kind: KindInference, Name: "svc", TopologyKey: "leaf", Children: []Spec{
		{Name: "frontend", Pods: 1, GPUsPerPod: 1},
		{Name: "roles", Children: []Spec{leafSpec("prefill", "rack", 2, 2), leafSpec("decode", "", 1, 4)}},
	}}
	want := []Pod{{0, 1}, {1, 2}, {1, 2}, {2, 4}}
	if diff := cmp.Diff(want, s.Flat()); diff != "" {
		t.Errorf("pods (-want +got):\n%s", diff)
	}
	if s.GPUs() != 9 {
		t.Errorf("GPUs = %d, want 9", s.GPUs())
	}
	if diff := cmp.Diff([]string{"leaf", "rack"}, s.Keys()); diff != "" {
		t.Errorf("keys (-want +got):\n%s", diff)
	}
}

// TestMix: the shapes drawn fit the cluster, kinds come in about their
// share, the same seed draws the same trees.
func TestMix(t *testing.T) {
	fit := Fit{GPUsPerNode: 4, ClusterGPUs: 2304, NVLinkGPUs: 72, GroupGPUs: 576}
	m := DefaultMix(1, "leaf", fit)
	draw := func(seed uint64) []*Spec {
		r := rand.New(rand.NewPCG(seed, 1))
		var out []*Spec
		for range 2000 {
			out = append(out, m.Draw(r))
		}
		return out
	}
	a := draw(3)
	if diff := cmp.Diff(a, draw(3)); diff != "" {
		t.Fatalf("same seed, other trees:\n%s", diff)
	}
	inference := 0
	for _, s := range a {
		if err := s.Validate(); err != nil {
			t.Fatal(err)
		}
		switch s.Kind {
		case KindInference:
			inference++
			if s.TopologyKey == topology.TopologyKeyNVLinkDomain && s.GPUs() > fit.NVLinkGPUs {
				t.Errorf("a service of %d GPUs in one NVLink domain of %d", s.GPUs(), fit.NVLinkGPUs)
			}
		case KindTraining:
			for _, c := range s.Children {
				if c.Pods*c.GPUsPerPod > fit.NVLinkGPUs || c.GPUsPerPod > fit.GPUsPerNode || c.TopologyKey != topology.TopologyKeyNVLinkDomain {
					t.Errorf("segment %+v does not fit an NVLink domain of %d", c, fit.NVLinkGPUs)
				}
			}
		}
		if s.GPUs() > fit.GroupGPUs {
			t.Errorf("a tree of %d GPUs, larger than a leaf", s.GPUs())
		}
	}
	if inference < 900 || inference > 1100 {
		t.Errorf("%d of 2000 trees are services, want about half", inference)
	}
	// On 8-GPU nodes that are their own NVLink domain (HGX) no default
	// training segment fits; services of at most 8 GPUs do, so only
	// those are drawn.
	hgx := DefaultMix(1, "leaf", Fit{GPUsPerNode: 8, ClusterGPUs: 4096, NVLinkGPUs: 8, GroupGPUs: 1024})
	if _, ok := hgx.MeanGPUs(); ok {
		r := rand.New(rand.NewPCG(1, 1))
		for range 100 {
			if s := hgx.Draw(r); s.Kind != KindInference || s.GPUs() > 8 && s.TopologyKey != "leaf" {
				t.Fatalf("HGX drew %s of %d GPUs at %s", s.Kind, s.GPUs(), s.TopologyKey)
			}
		}
	}
	if err := (&Mix{Share: 1.5}).Validate(); err == nil {
		t.Error("a share of 1.5 is valid")
	}
}
