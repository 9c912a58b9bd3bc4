package topology

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
)

const mnnvlA, mnnvlB = "0f2b6a8e-0000-4000-8000-00000000000a.1", "0f2b6a8e-0000-4000-8000-00000000000b.1"

func TestCheckNodeDomain(t *testing.T) {
	admin := func(d string) map[string]string { return map[string]string{LabelAdminNVLinkDomain: d} }
	for _, tc := range []struct {
		name       string
		node       string
		labels     map[string]string
		domains    []string
		require    bool
		wantReason string // "" trusted
	}{
		{name: "no label, not required", node: "n1", domains: []string{mnnvlA}},
		{name: "label agrees", node: "n1", labels: admin(mnnvlA), domains: []string{mnnvlA}, require: true},
		{name: "label contradicts", node: "n1", labels: admin(mnnvlA), domains: []string{mnnvlB},
			wantReason: "node n1 publishes GPUs in NVLink domain " + mnnvlB + ", but its label node-restriction.kubernetes.io/gpufabric.nvlink-domain says \"" + mnnvlA + "\""},
		{name: "one GPU of several contradicts", node: "n1", labels: admin(mnnvlA), domains: []string{mnnvlA, mnnvlB}, wantReason: "but its label"},
		{name: "label and no GPUs", node: "cpu", labels: admin(mnnvlA)},
		{name: "own NVSwitch domain, required", node: "h1", domains: []string{"nvswitch.h1"}, require: true},
		{name: "own domain, label says otherwise", node: "h1", labels: admin(mnnvlA), domains: []string{"nvswitch.h1"}, wantReason: "but its label"},
		{name: "another node's NVSwitch domain", node: "h2", domains: []string{"nvswitch.h1"}, wantReason: "node h2 publishes GPUs in NVLink domain nvswitch.h1, which belongs to another node"},
		{name: "another node's domain, label agrees", node: "h2", labels: admin("none.h1"), domains: []string{"none.h1"}, wantReason: "belongs to another node"},
		{name: "multi-node, required, no label", node: "n1", domains: []string{mnnvlA}, require: true,
			wantReason: "node n1 publishes GPUs in multi-node NVLink domain " + mnnvlA + " without the label node-restriction.kubernetes.io/gpufabric.nvlink-domain, which --require-admin-topology-labels requires"},
		{name: "kubelet-settable label is no admin label", node: "n1", labels: map[string]string{"nvidia.com/gpu.clique": mnnvlA}, domains: []string{mnnvlA}, require: true, wantReason: "without the label"},
	} {
		r := CheckNodeDomain(tc.node, tc.labels, NodeGPUInfo{Domains: tc.domains}, tc.require)
		switch {
		case tc.wantReason == "" && r != nil:
			t.Errorf("%s: refused: %s", tc.name, r.Reason)
		case tc.wantReason != "" && r == nil:
			t.Errorf("%s: trusted, want refused (%s)", tc.name, tc.wantReason)
		case r != nil && (!strings.Contains(r.Reason, tc.wantReason) || r.Node != tc.node || !cmp.Equal(r.Declared, tc.domains) || r.Admin != tc.labels[LabelAdminNVLinkDomain]):
			t.Errorf("%s: %+v, want reason %q", tc.name, r, tc.wantReason)
		}
	}
}

// TestTreeLeavesRefusedNodesOut: a node whose slices contradict its
// admin label is in no domain of any level (configured, ad hoc, the
// cluster), its GPUs count nowhere, and Tree.Refused names it; the
// fabric-domain pools neither count nor select it.
func TestTreeLeavesRefusedNodesOut(t *testing.T) {
	rack := func(r, dom string) map[string]string {
		l := map[string]string{LabelAdminRack: r, "zone": "z"}
		if dom != "" {
			l[LabelAdminNVLinkDomain] = dom
		}
		return l
	}
	nodes := []*v1.Node{testNode("a1", rack("r1", mnnvlA)), testNode("a2", rack("r1", "")), testNode("b1", rack("r2", mnnvlB)), testNode("intruder", rack("r2", mnnvlB))}
	slices := []*resourceapi.ResourceSlice{gpuSlice("a1", 1, mnnvlA, mnnvlA), gpuSlice("a2", 1, mnnvlA, mnnvlA), gpuSlice("b1", 1, mnnvlB), gpuSlice("intruder", 1, mnnvlA, mnnvlA, mnnvlA, mnnvlA)}
	for _, tc := range []struct {
		require     bool
		wantRefused []string
		wantA       []string
	}{
		{require: false, wantRefused: []string{"intruder"}, wantA: []string{"a1", "a2"}},
		{require: true, wantRefused: []string{"a2", "intruder"}, wantA: []string{"a1"}},
	} {
		tree, err := BuildTree(TreeConfig{LabelLevels: []string{LabelAdminRack}, RequireAdminLabels: tc.require}, nodes, slices)
		if err != nil {
			t.Fatal(err)
		}
		var refused []string
		for _, r := range tree.Refused {
			refused = append(refused, r.Node)
			if !tree.IsRefused(r.Node) {
				t.Errorf("IsRefused(%s) false", r.Node)
			}
		}
		if !cmp.Equal(refused, tc.wantRefused) {
			t.Errorf("require=%t: refused %v, want %v", tc.require, refused, tc.wantRefused)
		}
		for _, l := range append(tree.Levels, tree.NewLabelLevel("zone", nodes)) {
			for _, n := range tc.wantRefused {
				if d := l.DomainOf(n); d != nil {
					t.Errorf("require=%t: refused node %s is in %s %s", tc.require, n, l.Key, d.ID)
				}
			}
		}
		if a := tree.Levels[0].Domain(mnnvlA); a == nil || !cmp.Equal(a.Nodes, tc.wantA) || a.GPUs != 2*len(tc.wantA) {
			t.Errorf("require=%t: domain A %+v, want nodes %v", tc.require, a, tc.wantA)
		}
		refuse := func(node string, info NodeGPUInfo) bool {
			for _, n := range nodes {
				if n.Name == node {
					return CheckNodeDomain(node, n.Labels, info, tc.require) != nil
				}
			}
			return false
		}
		for _, p := range TrustedFabricDomainPools(slices, nil, 2, refuse) {
			if p.Domain == mnnvlA && (!cmp.Equal(p.Nodes, tc.wantA) || p.GPUs != 2*len(tc.wantA)) {
				t.Errorf("require=%t: pool of domain A %v with %d GPUs, want %v", tc.require, p.Nodes, p.GPUs, tc.wantA)
			}
		}
	}
	if err := AdminOwnedLevels([]string{LabelAdminRack, "topology.gpufabric.dev/rack"}); err == nil || !strings.Contains(err.Error(), `"topology.gpufabric.dev/rack" is a label kubelets can set`) {
		t.Errorf("AdminOwnedLevels: %v", err)
	}
}
