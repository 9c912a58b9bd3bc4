package trees

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	schedulingv1alpha3 "k8s.io/api/scheduling/v1alpha3"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/gpufabric/gpufabric/pkg/gang/commit"
	"github.com/gpufabric/gpufabric/pkg/gang/composite"
	"github.com/gpufabric/gpufabric/pkg/gang/evict"
	"github.com/gpufabric/gpufabric/pkg/gang/placement/index"
	"github.com/gpufabric/gpufabric/pkg/gang/placement/scenario"
	"github.com/gpufabric/gpufabric/pkg/gang/preemption"
	"github.com/gpufabric/gpufabric/pkg/gang/vocab"
	"github.com/gpufabric/gpufabric/pkg/topology"
)

// TestPreemptionTree: a tree's preemption plans at its root's level,
// holds the nodes its running leaves use, and its placer puts every
// placed leaf's pods in one decision.
func TestPreemptionTree(t *testing.T) {
	w := newWorld()
	root := w.composite("job", "", "wl", 2)
	root.Spec.SchedulingConstraints = &schedulingv1alpha3.CompositePodGroupSchedulingConstraints{Topology: []schedulingv1alpha3.TopologyConstraint{{Key: "rack"}}}
	a := &attempt{key: vocab.CompositeKey("ns", "job"), root: root, leaves: map[types.UID]*leafState{
		"x": {ms: Members{BoundNodes: []string{"c-n01", "c-n00"}}},
		"y": {ms: Members{BoundNodes: []string{"c-n00"}}},
		"z": {},
	}}
	b, err := scenario.Build(scenario.Scenario{Levels: []string{"rack"}, Domains: []scenario.DomainSpec{
		{ID: "a", Nodes: 2, GPUsPerNode: 4, Labels: map[string]string{"rack": "r0"}},
		{ID: "b", Nodes: 2, GPUsPerNode: 4, Labels: map[string]string{"rack": "r0"}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	group := &composite.Group{Name: "CompositePodGroup/job", TopologyKey: "rack", MinGroupCount: 2}
	for _, name := range []string{"enc", "dec"} {
		g, _, err := scenario.BuildGang(scenario.GangSpec{Name: name, Pods: 2, GPUsPerPod: 4, TopologyKey: topology.TopologyKeyNVLinkDomain})
		if err != nil {
			t.Fatal(err)
		}
		group.Children = append(group.Children, &composite.Group{Name: "PodGroup/" + name, TopologyKey: topology.TopologyKeyNVLinkDomain, Gang: g})
	}
	pt := a.preemptionTree(group, 0)
	if pt.Namespace != "ns" || pt.TopologyKey != "rack" || !slices.Equal(pt.BoundNodes, []string{"c-n00", "c-n01"}) {
		t.Errorf("tree %+v: want ns, key rack, bound nodes c-n00 c-n01", pt)
	}
	b.Config.Index.AllocateTimeout = time.Minute
	snap, err := index.NewSnapshot(t.Context(), b.Config.Index, b.Input)
	if err != nil {
		t.Fatal(err)
	}
	d, why, err := pt.Placer.Place(t.Context(), b.Config, snap)
	if err != nil || d == nil {
		t.Fatalf("place: %v %s", err, why)
	}
	var pods []string
	for _, p := range d.Pods {
		pods = append(pods, p.Name)
	}
	slices.Sort(pods)
	if d.Gang != a.key || strings.Join(pods, ",") != "dec-00,dec-01,enc-00,enc-01" {
		t.Errorf("decision of %s with pods %v, want the tree's four", d.Gang, pods)
	}
	big, _, err := scenario.BuildGang(scenario.GangSpec{Name: "big", Pods: 2, GPUsPerPod: 4})
	if err != nil {
		t.Fatal(err)
	}
	group.Children = append(group.Children, &composite.Group{Name: "PodGroup/big", Gang: big})
	group.MinGroupCount = 3
	if d, why, err := pt.Placer.Place(t.Context(), b.Config, snap); err != nil || d != nil || !strings.Contains(why, "CompositePodGroup/job") {
		t.Errorf("a tree too big: %v %v %q, want its refusal", d, err, why)
	}
}

// fakeEvictor records the trees it is asked to preempt for.
type fakeEvictor struct {
	asked []*preemption.Tree
	held  sets.Set[string]
}

func (f *fakeEvictor) Held(*evict.Attempt) sets.Set[string] { return f.held }
func (f *fakeEvictor) HeldNote(*evict.Attempt) string {
	if f.held.Len() == 0 {
		return ""
	}
	return "held note"
}
func (f *fakeEvictor) Nominated(string) bool { return false }
func (f *fakeEvictor) AfterTreeRefusal(_ context.Context, a *evict.Attempt, t *preemption.Tree, in index.SnapshotInput) (string, error) {
	if a.Key != vocab.CompositeKey("ns", "job") || len(in.Nodes) != 1 {
		return "", fmt.Errorf("attempt %s on %d nodes", a.Key, len(in.Nodes))
	}
	f.asked = append(f.asked, t)
	return "preempting", nil
}

// TestAfterRefusal: a refused tree with members waiting asks the evict
// room to preempt for it, on the input less the held nodes, and its
// refusal says what is held first and the preemption last; a tree with
// nothing waiting preempts nothing.
func TestAfterRefusal(t *testing.T) {
	ev := &fakeEvictor{held: sets.New("n1")}
	var inputFor sets.Set[string]
	c := NewCycle(Deps{Evictor: ev, Pipeline: commit.NewPipeline(1, nil), Input: func(held sets.Set[string]) (index.SnapshotInput, error) {
		inputFor = held
		return index.SnapshotInput{Nodes: []*v1.Node{{}}}, nil
	}})
	root := newWorld().composite("job", "", "wl", 1)
	a := &attempt{key: vocab.CompositeKey("ns", "job"), root: root, leaves: map[types.UID]*leafState{}}
	a.pre = &evict.Attempt{Key: a.key, Root: root}
	msg, err := c.afterRefusal(t.Context(), a, &composite.Group{}, "refused")
	if err != nil || msg != "held note\nrefused" || len(ev.asked) != 0 {
		t.Errorf("nothing waiting: %q %v, asked %d; want the note, no preemption", msg, err, len(ev.asked))
	}
	a.pre.Members = []*v1.Pod{{}}
	msg, err = c.afterRefusal(t.Context(), a, &composite.Group{}, "refused")
	if err != nil || msg != "held note\nrefused\npreempting" || len(ev.asked) != 1 || !inputFor.Has("n1") {
		t.Errorf("waiting: %q %v, asked %d, input less %v; want the preemption", msg, err, len(ev.asked), inputFor)
	}
}
