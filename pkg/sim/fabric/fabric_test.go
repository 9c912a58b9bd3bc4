package fabric

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"sigs.k8s.io/yaml"

	"github.com/gpufabric/gpufabric/pkg/gang/placement/scenario"
)

// TestLoad: a fabric written as a File (nodes, slices, the existing
// load's claims) and loaded again is the same fabric: its levels, domains,
// GPUs, busy GPUs and their positions.
func TestLoad(t *testing.T) {
	sc := scenario.Scenario{Levels: []string{LabelRack, LabelLeaf},
		Domains: []scenario.DomainSpec{
			{ID: "a", Nodes: 2, GPUsPerNode: 4, Labels: map[string]string{LabelRack: "a", LabelLeaf: "l0"}},
			{ID: "b", Nodes: 3, GPUsPerNode: 4, Labels: map[string]string{LabelRack: "b", LabelLeaf: "l0"}},
		},
		Load: []scenario.LoadSpec{{Node: "b-n01", GPUs: []int{0, 1}}}}
	built, err := scenario.Build(sc)
	if err != nil {
		t.Fatal(err)
	}
	want, err := New("tiny", sc.Levels, built.Input)
	if err != nil {
		t.Fatal(err)
	}
	if want.Busy[want.NodeIndex["b-n01"]] != 2 || want.TotalGPUs != 20 {
		t.Fatalf("built fabric: busy %v, %d GPUs", want.Busy, want.TotalGPUs)
	}
	ff := File{Levels: sc.Levels}
	for _, n := range want.Input.Nodes {
		ff.Nodes = append(ff.Nodes, *n)
	}
	for _, s := range want.Input.ResourceSlices {
		ff.ResourceSlices = append(ff.ResourceSlices, *s)
	}
	for _, c := range want.Input.ResourceClaims {
		ff.ResourceClaims = append(ff.ResourceClaims, *c)
	}
	data, err := yaml.Marshal(ff)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "fabric.yaml")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	ignore := cmpopts.IgnoreFields(Fabric{}, "Name", "Input", "Tree")
	if diff := cmp.Diff(want, got, ignore, cmpopts.IgnoreTypes([]*v1.Pod(nil), []*resourceapi.ResourceClaim(nil))); diff != "" {
		t.Errorf("fabric (-want +got):\n%s", diff)
	}
}
