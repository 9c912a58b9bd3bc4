package composite_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/gpufabric/gpufabric/pkg/gang/composite"
	"github.com/gpufabric/gpufabric/pkg/gang/placement"
	"github.com/gpufabric/gpufabric/pkg/gang/placement/index"
	"github.com/gpufabric/gpufabric/pkg/gang/placement/scenario"
	"github.com/gpufabric/gpufabric/pkg/topology"
)

// treeSpec is a tree in a test's words: a composite (children) or a leaf
// (gang).
type treeSpec struct {
	Name     string             `json:"name"`
	Key      string             `json:"topologyKey,omitempty"`
	Min      int                `json:"minGroupCount,omitempty"` // default: all children
	Children []treeSpec         `json:"children,omitempty"`
	Gang     *scenario.GangSpec `json:"gang,omitempty"`
}

// treeFile is a golden tree case: a cluster (its gangs are placed first,
// as load) and trees placed in order, each assumed when placed.
type treeFile struct {
	scenario.Scenario `json:",inline"`
	Trees             []treeSpec `json:"trees"`
}

// build turns a spec into a Group; leaves' gangs come from
// scenario.BuildGang (the spec's key is the gang's topology key).
func (ts treeSpec) build(t *testing.T) *composite.Group {
	t.Helper()
	if ts.Gang != nil {
		gs := *ts.Gang
		gs.Name, gs.TopologyKey = ts.Name, ts.Key
		g, _, err := scenario.BuildGang(gs)
		if err != nil {
			t.Fatalf("leaf %s: %v", ts.Name, err)
		}
		return &composite.Group{Name: "PodGroup/" + ts.Name, TopologyKey: ts.Key, Gang: g}
	}
	g := &composite.Group{Name: "CompositePodGroup/" + ts.Name, TopologyKey: ts.Key, MinGroupCount: ts.Min}
	for _, c := range ts.Children {
		g.Children = append(g.Children, c.build(t))
	}
	if g.MinGroupCount == 0 {
		g.MinGroupCount = len(g.Children)
	}
	return g
}

// snapshotOf builds a scenario's snapshot with a one-minute Allocate
// timeout (a loaded machine must not turn a slow call into a refusal) and
// its load gangs placed and assumed.
func snapshotOf(ctx context.Context, t *testing.T, sc scenario.Scenario) (placement.Config, *index.Snapshot) {
	t.Helper()
	b, err := scenario.Build(sc)
	if err != nil {
		t.Fatal(err)
	}
	b.Config.Index.AllocateTimeout = time.Minute
	s, err := index.NewSnapshot(ctx, b.Config.Index, b.Input)
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range b.Gangs {
		d, u, err := placement.Place(ctx, b.Config, s, g)
		if err != nil || d == nil {
			t.Fatalf("load gang %s: %v %+v", g.Name, err, u)
		}
		if err := placement.Assume(ctx, s, g, d); err != nil {
			t.Fatal(err)
		}
	}
	return b.Config, s
}

// treeOutcome is the golden form of one tree's result.
type treeOutcome struct {
	Tree    string   `json:"tree"`
	Placed  []string `json:"placed,omitempty"`  // "<leaf>: pod@node ..."
	Domains []string `json:"domains,omitempty"` // "<group>: <key> <domain>"
	Refused string   `json:"refused,omitempty"`
	Search  bool     `json:"search,omitempty"` // the joint search ran
}

func outcomeOf(name string, d *composite.Decision, u *composite.Unschedulable) treeOutcome {
	out := treeOutcome{Tree: name}
	if u != nil {
		out.Refused = u.Message
		return out
	}
	for _, l := range d.Leaves {
		var pods []string
		for _, p := range l.Decision.Pods {
			pods = append(pods, p.Name+"@"+p.Node)
		}
		out.Placed = append(out.Placed, l.Group.Name+": "+strings.Join(pods, " "))
	}
	for _, gd := range d.Domains {
		out.Domains = append(out.Domains, fmt.Sprintf("%s: %s %s", gd.Group, gd.TopologyKey, gd.Domain))
	}
	out.Search = d.Stats.Searches > 0
	return out
}

// runTrees places a file's trees in order on one snapshot, assuming each
// placed tree's leaves.
func runTrees(ctx context.Context, t *testing.T, f treeFile) []treeOutcome {
	t.Helper()
	cfg, s := snapshotOf(ctx, t, f.Scenario)
	var out []treeOutcome
	for _, ts := range f.Trees {
		root := ts.build(t)
		d, u, err := composite.Place(ctx, cfg, s, root, composite.Options{})
		if err != nil {
			t.Fatalf("tree %s: %v", ts.Name, err)
		}
		out = append(out, outcomeOf(ts.Name, d, u))
		if d == nil {
			continue
		}
		checkDecision(t, s, root, d)
		for _, l := range d.Leaves {
			if err := placement.Assume(ctx, s, l.Group.Gang, l.Decision); err != nil {
				t.Fatal(err)
			}
		}
	}
	return out
}

// checkDecision checks a decision against the tree's rules: every keyed
// group's members lie in its domain, and that domain inside its parent's.
func checkDecision(t *testing.T, s *index.Snapshot, root *composite.Group, d *composite.Decision) {
	t.Helper()
	dom := map[string]*topology.Domain{}
	for _, gd := range d.Domains {
		dom[gd.Group] = s.Level(gd.TopologyKey).Domain(gd.Domain)
	}
	nodes := map[*composite.Group][]string{}
	for _, l := range d.Leaves {
		for _, p := range l.Decision.Pods {
			nodes[l.Group] = append(nodes[l.Group], p.Node)
		}
	}
	var walk func(g *composite.Group, within *topology.Domain) []string
	walk = func(g *composite.Group, within *topology.Domain) []string {
		here := within
		if x := dom[g.Name]; x != nil {
			here = x
		}
		got := slices.Clone(nodes[g])
		for _, c := range g.Children {
			got = append(got, walk(c, here)...)
		}
		for _, n := range got {
			if here != nil && !slices.Contains(here.Nodes, n) {
				t.Errorf("%s: a member on %s, outside its domain %s %s", g.Name, n, here.Key, here.ID)
			}
		}
		return got
	}
	walk(root, nil)
}

func readTrees(t *testing.T, file string) treeFile {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var f treeFile
	if err := yaml.UnmarshalStrict(b, &f); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	return f
}
