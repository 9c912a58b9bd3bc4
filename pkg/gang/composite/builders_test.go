package composite_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/dynamic-resource-allocation/structured"
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
	// Coupling is the annotation gpufabric.dev/rail-coupling.
	Coupling string `json:"railCoupling,omitempty"`
}

// treeFile is a golden tree case: a cluster (its gangs are placed first,
// as load) and trees placed in order, each assumed when placed.
type treeFile struct {
	scenario.Scenario `json:",inline"`
	Trees             []treeSpec `json:"trees"`
	// ShowRails writes each placed pod's IB rails (always for a tree with
	// a rail coupling).
	ShowRails bool `json:"showRails,omitempty"`
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
		return &composite.Group{Name: "PodGroup/" + ts.Name, TopologyKey: ts.Key, Gang: g, RailCoupling: ts.Coupling}
	}
	g := &composite.Group{Name: "CompositePodGroup/" + ts.Name, TopologyKey: ts.Key, MinGroupCount: ts.Min, RailCoupling: ts.Coupling}
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
	// Coupled: the decision's rail couplings.
	Coupled []string `json:"coupled,omitempty"`
}

// outcomeOf is a tree's outcome; with s, each pod's IB rails too
// ("pod@node{rails}").
func outcomeOf(name string, s *index.Snapshot, d *composite.Decision, u *composite.Unschedulable) treeOutcome {
	out := treeOutcome{Tree: name}
	if u != nil {
		out.Refused = u.Message
		return out
	}
	for _, l := range d.Leaves {
		var pods []string
		for _, p := range l.Decision.Pods {
			pod := p.Name + "@" + p.Node
			if s != nil {
				pod += fmt.Sprint(podRails(s, l.Decision, p.Name))
			}
			pods = append(pods, pod)
		}
		out.Placed = append(out.Placed, l.Group.Name+": "+strings.Join(pods, " "))
	}
	for _, gd := range d.Domains {
		out.Domains = append(out.Domains, fmt.Sprintf("%s: %s %s", gd.Group, gd.TopologyKey, gd.Domain))
	}
	for _, c := range d.Coupled {
		line := fmt.Sprintf("%s (%s): rails %v: %s", c.Group, c.Mode, c.Rails, strings.Join(c.Leaves, ", "))
		if c.Unmet != "" {
			line = fmt.Sprintf("%s (%s): unmet: %s", c.Group, c.Mode, c.Unmet)
		}
		out.Coupled = append(out.Coupled, line)
	}
	out.Search = d.Stats.Searches > 0
	return out
}

// podRails is the sorted IB rails of the devices a pod's own claims get.
func podRails(s *index.Snapshot, d *placement.Decision, pod string) []int64 {
	var node string
	for _, p := range d.Pods {
		if p.Name == pod {
			node = p.Node
		}
	}
	var out []int64
	for _, c := range d.Claims {
		if c.Pod != pod || c.Shared {
			continue
		}
		for _, r := range c.Allocation.Devices.Results {
			dev := s.Node(node).Device(structured.MakeDeviceID(r.Driver, r.Pool, r.Device))
			if rail, ok := topology.DeviceIBRail(dev); ok && !slices.Contains(out, rail) {
				out = append(out, rail)
			}
		}
	}
	slices.Sort(out)
	return out
}

// hasCoupling reports whether a tree spec asks for a rail coupling.
func (ts treeSpec) hasCoupling() bool {
	return ts.Coupling != "" || slices.ContainsFunc(ts.Children, treeSpec.hasCoupling)
}

// checkCoupled checks a decision's couplings: every pod of a coupled leaf
// uses rails of the coupling's set only, and the pods of a leaf one set.
func checkCoupled(t *testing.T, s *index.Snapshot, d *composite.Decision) {
	t.Helper()
	of := map[string]*placement.Decision{}
	for _, l := range d.Leaves {
		of[l.Group.Name] = l.Decision
	}
	for _, c := range d.Coupled {
		for _, name := range c.Leaves {
			var first []int64
			for i, p := range of[name].Pods {
				got := podRails(s, of[name], p.Name)
				for _, r := range got {
					if !slices.Contains(c.Rails, r) {
						t.Errorf("%s: pod %s on rails %v, outside the coupled set %v of %s", name, p.Name, got, c.Rails, c.Group)
					}
				}
				if i == 0 {
					first = got
				} else if !slices.Equal(first, got) {
					t.Errorf("%s: pods on rails %v and %v, not rail-aligned", name, first, got)
				}
			}
		}
	}
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
		var rs *index.Snapshot
		if f.ShowRails || ts.hasCoupling() {
			rs = s
		}
		out = append(out, outcomeOf(ts.Name, rs, d, u))
		if d == nil {
			continue
		}
		checkDecision(t, s, root, d)
		checkCoupled(t, s, d)
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
