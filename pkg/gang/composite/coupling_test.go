package composite_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpufabric/gpufabric/pkg/gang/composite"
	"github.com/gpufabric/gpufabric/pkg/gang/placement/scenario"
	"github.com/gpufabric/gpufabric/pkg/topology"
)

// TestRailCouplingValidation: a value that is not one of the
// annotation's, or a coupling asked on a PodGroup, makes the tree invalid
// (composite.ErrInvalid) with the group and the annotation named; none on
// a PodGroup and every value on a composite are valid.
func TestRailCouplingValidation(t *testing.T) {
	leaf := func(name, coupling string) treeSpec {
		return treeSpec{Name: name, Coupling: coupling, Gang: &scenario.GangSpec{Pods: 1, GPUsPerPod: 1}}
	}
	tests := map[string]struct {
		tree    treeSpec
		wantErr []string // substrings of the error; nil: valid
	}{
		"required":           {tree: treeSpec{Name: "t", Coupling: "required", Children: []treeSpec{leaf("a", ""), leaf("b", "")}}},
		"preferred":          {tree: treeSpec{Name: "t", Coupling: "preferred", Children: []treeSpec{leaf("a", ""), leaf("b", "")}}},
		"none on a PodGroup": {tree: treeSpec{Name: "t", Coupling: "required", Children: []treeSpec{leaf("a", ""), leaf("b", "none")}}},
		"a bad value": {tree: treeSpec{Name: "t", Coupling: "Required", Children: []treeSpec{leaf("a", "")}},
			wantErr: []string{"CompositePodGroup/t", topology.AnnotationRailCoupling, `"Required"`}},
		"required on a PodGroup": {tree: treeSpec{Name: "t", Children: []treeSpec{leaf("a", "required")}},
			wantErr: []string{"PodGroup/a", topology.AnnotationRailCoupling, "only opt out"}},
		"a bad value on a nested composite": {tree: treeSpec{Name: "t", Children: []treeSpec{{Name: "u", Coupling: "yes", Children: []treeSpec{leaf("a", "")}}}},
			wantErr: []string{"CompositePodGroup/u", topology.AnnotationRailCoupling}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			cfg, s := snapshotOf(ctx, t, scenario.Scenario{Domains: []scenario.DomainSpec{{ID: "a", Nodes: 2, GPUsPerNode: 8}}})
			d, _, err := composite.Place(ctx, cfg, s, tc.tree.build(t), composite.Options{})
			if tc.wantErr == nil {
				if err != nil || d == nil {
					t.Fatalf("got %v, want placed", err)
				}
				return
			}
			if !errors.Is(err, composite.ErrInvalid) {
				t.Fatalf("got %v, want ErrInvalid", err)
			}
			for _, w := range tc.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not name %q", err, w)
				}
			}
		})
	}
}

// TestNestedCouplings: the nearest annotated composite decides: a
// sub-composite with its own coupling is a coupling of its own (its own
// rail set), none leaves a subtree out, a PodGroup without GPUs is never
// coupled.
func TestNestedCouplings(t *testing.T) {
	ctx := context.Background()
	gpus := func(name string) treeSpec {
		return treeSpec{Name: name, Gang: &scenario.GangSpec{Pods: 1, GPUsPerPod: 4}}
	}
	tree := treeSpec{Name: "root", Coupling: "required", Children: []treeSpec{
		gpus("a"), gpus("b"),
		{Name: "cpu", Gang: &scenario.GangSpec{Pods: 1}},
		{Name: "inner", Coupling: "required", Children: []treeSpec{gpus("c"), gpus("d")}},
		{Name: "loose", Coupling: "none", Children: []treeSpec{gpus("e")}},
	}}
	cfg, s := snapshotOf(ctx, t, scenario.Scenario{Domains: []scenario.DomainSpec{{ID: "a", Nodes: 3, GPUsPerNode: 8}}})
	d, u, err := composite.Place(ctx, cfg, s, tree.build(t), composite.Options{})
	if err != nil || d == nil {
		t.Fatalf("%v %+v", err, u)
	}
	checkCoupled(t, s, d)
	got := map[string][]string{}
	for _, c := range d.Coupled {
		got[c.Group] = c.Leaves
		if len(c.Rails) != 4 {
			t.Errorf("%s: rails %v, want a set of 4", c.Group, c.Rails)
		}
	}
	want := map[string][]string{
		"CompositePodGroup/root":  {"PodGroup/a", "PodGroup/b"},
		"CompositePodGroup/inner": {"PodGroup/c", "PodGroup/d"},
	}
	if diff := cmp.Diff(want, got, sortLeaves); diff != "" {
		t.Errorf("couplings (-want +got):\n%s", diff)
	}
	if !strings.Contains(d.Summary(), "on IB rails {") {
		t.Errorf("summary %q names no rail set", d.Summary())
	}
}

var sortLeaves = cmp.Transformer("sorted", func(in []string) []string {
	out := slices.Clone(in)
	slices.Sort(out)
	return out
})
