package peer

import (
	"slices"
	"testing"

	"k8s.io/utils/ptr"
)

// TestTreeObjects: the trees' objects agree with each other as
// kube-scheduler 1.37 needs (every PodGroup names its parent and a
// template of the Workload, children in creation order, the root a gang
// of all children in one leaf), and the trap reverses every other tree's
// order.
func TestTreeObjects(t *testing.T) {
	for _, tc := range []struct {
		name      string
		w         peerWorkload
		g         int
		wantOrder []string // the children's roles in creation order
		trapped   bool
	}{
		{name: "tree8x16", w: tree8x16Workload(), wantOrder: slices.Repeat([]string{"stage"}, 8)},
		{name: "trap, even tree", w: treeTrapWorkload(4), g: 2, wantOrder: []string{"flex", "tight"}, trapped: true},
		{name: "trap, odd tree", w: treeTrapWorkload(4), g: 3, wantOrder: []string{"tight", "flex"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tree, name := tc.w.tree, peerGroupName(tc.g)
			var roles []string
			for _, i := range tree.order(tc.g) {
				roles = append(roles, tree.children[i].role)
			}
			if !slices.Equal(roles, tc.wantOrder) || tree.trapped(tc.g) != tc.trapped {
				t.Errorf("order %v trapped %v; want %v, %v", roles, tree.trapped(tc.g), tc.wantOrder, tc.trapped)
			}
			wl := treeWorkload("ns", name, tree, tc.g)
			root := wl.Spec.CompositePodGroupTemplates[0]
			cpg := treeRoot("ns", name, len(tree.children))
			if cpg.Spec.WorkloadRef.TemplateName != root.Name || cpg.Spec.SchedulingPolicy.Gang.MinGroupCount != int32(len(tree.children)) ||
				cpg.Spec.SchedulingConstraints.Topology[0].Key != benchLeafLabel {
				t.Errorf("root %+v does not match its template %s", cpg.Spec, root.Name)
			}
			for k, i := range tree.order(tc.g) {
				if k > 0 && treeChildName(name, k) < treeChildName(name, k-1) {
					t.Errorf("child %d's name %s sorts before child %d's", k, treeChildName(name, k), k-1)
				}
				pg := treeLeaf("ns", name, treeChildName(name, k), tree.children[i].pods)
				if got := root.PodGroupTemplates[k].Name; pg.Spec.WorkloadRef.TemplateName != got || ptr.Deref(pg.Spec.ParentCompositePodGroupName, "") != name {
					t.Errorf("child %d: template %s, parent %v; want template %s, parent %s", i, pg.Spec.WorkloadRef.TemplateName, pg.Spec.ParentCompositePodGroupName, got, name)
				}
				if pg.Spec.SchedulingPolicy.Gang.MinCount != int32(tree.children[i].pods) {
					t.Errorf("child %d: minCount %d", i, pg.Spec.SchedulingPolicy.Gang.MinCount)
				}
			}
		})
	}
	if n := treeTrapWorkload(5).trapCount(); n != 3 {
		t.Errorf("5 trap trees: %d in the trap's order; want 3", n)
	}
}
