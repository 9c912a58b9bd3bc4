package index_test

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2/ktesting"

	"github.com/gpufabric/gpufabric/pkg/gang/placement"
	"github.com/gpufabric/gpufabric/pkg/gang/placement/index"
	"github.com/gpufabric/gpufabric/pkg/gang/placement/placementtest"
	"github.com/gpufabric/gpufabric/pkg/gang/placement/scenario"
	"github.com/gpufabric/gpufabric/pkg/topology"
)

// TestRefusedNodesGetNothing: a node whose slices put it in NVLink
// domain nvlA while its admin label says nvlB is in no domain of the
// snapshot (its GPUs free in no level index), and no gang is placed on it
// even where it would be the only fit; once the admin label agrees, a
// cached snapshot brought up to date takes it back. With
// RequireAdminLabels, a node without the label is refused too.
func TestRefusedNodesGetNothing(t *testing.T) {
	admin := func(d string) map[string]string { return map[string]string{topology.LabelAdminNVLinkDomain: d} }
	sc := scenario.Scenario{Domains: []scenario.DomainSpec{
		{ID: "nvlA", Nodes: 4, GPUsPerNode: 4, NodeLabels: map[int]map[string]string{0: admin("nvlA"), 1: admin("nvlA"), 2: admin("nvlB")}},
	}, Gangs: []scenario.GangSpec{
		{Name: "fits-trusted", Pods: 3, GPUsPerPod: 4, TopologyKey: topology.TopologyKeyNVLinkDomain},
		{Name: "needs-the-intruder", Pods: 4, GPUsPerPod: 4, TopologyKey: topology.TopologyKeyNVLinkDomain},
		{Name: "anywhere", Pods: 4, GPUsPerPod: 4},
	}}
	intruder, unlabelled := scenario.NodeName("nvlA", 2), scenario.NodeName("nvlA", 3)
	for _, require := range []bool{false, true} {
		built, err := scenario.Build(sc)
		if err != nil {
			t.Fatal(err)
		}
		built.Config.Index.Tree.RequireAdminLabels = require
		_, ctx := ktesting.NewTestContext(t)
		cache := index.NewCache(built.Config.Index)
		placementtest.FeedCache(cache, built.Input)
		snap, err := cache.Update(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		wantRefused := []string{intruder}
		if require {
			wantRefused = append(wantRefused, unlabelled)
		}
		var refused []string
		for _, r := range snap.Tree().Refused {
			refused = append(refused, r.Node)
		}
		if !cmp.Equal(refused, wantRefused) {
			t.Errorf("require=%t: refused %v, want %v", require, refused, wantRefused)
		}
		li, err := snap.LevelIndex(ctx, snap.Tree().Levels[0], topology.GPUDeviceClass)
		if err != nil {
			t.Fatal(err)
		}
		if e := li.Of(intruder); e != nil {
			t.Errorf("require=%t: the intruder is in domain %s", require, e.Domain().ID)
		}
		for _, g := range built.Gangs {
			d, u, err := placement.Place(ctx, built.Config, snap, g)
			if err != nil {
				t.Fatal(err)
			}
			if u != nil && !strings.Contains(u.Message, fmt.Sprintf("nodes rejected: %d %s", len(wantRefused), placement.CheckNodeRefused)) {
				t.Errorf("require=%t: gang %s: message %q does not count the refused nodes", require, g.Key(), u.Message)
			}
			var nodes []string
			if d != nil {
				for _, p := range d.Pods {
					nodes = append(nodes, p.Node)
				}
			}
			for _, n := range refused {
				if slices.Contains(nodes, n) {
					t.Errorf("require=%t: gang %s placed on refused node %s: %v", require, g.Key(), n, nodes)
				}
			}
			if wantPlaced := g.Key() == built.Gangs[0].Key() && !require; (d != nil) != wantPlaced {
				t.Errorf("require=%t: gang %s placed %v, want placed %t", require, g.Key(), nodes, wantPlaced)
			}
		}
		// The admin relabels the node to what its slices say.
		n := nodeNamed(built.Input.Nodes, intruder).DeepCopy()
		n.Labels = maps.Clone(n.Labels)
		n.Labels[topology.LabelAdminNVLinkDomain] = "nvlA"
		cache.SetNode(n)
		if snap, err = cache.Update(ctx, snap); err != nil {
			t.Fatal(err)
		}
		if snap.Tree().IsRefused(intruder) || snap.Tree().Levels[0].DomainOf(intruder) == nil {
			t.Errorf("require=%t: a node whose label agrees is still refused", require)
		}
	}
}

func nodeNamed(nodes []*v1.Node, name string) *v1.Node {
	for _, n := range nodes {
		if n.Name == name {
			return n
		}
	}
	return nil
}
