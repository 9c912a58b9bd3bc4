package sim

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpufabric/gpufabric/pkg/sim/fabric"
	"github.com/gpufabric/gpufabric/pkg/sim/trees"
	"github.com/gpufabric/gpufabric/pkg/topology"
)

// treeTrace generates a trace with share of its jobs as trees.
func treeTrace(t *testing.T, f *fabric.Fabric, seed uint64, gangs int, share float64) *Trace {
	t.Helper()
	cfg := DefaultTraceConfig(seed, f)
	cfg.Gangs = gangs
	if err := cfg.WithTrees(f, TreeOptions{Share: share, InferenceShare: 0.5}); err != nil {
		t.Fatal(err)
	}
	tr, err := GenerateTrace(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

// TestTreeTrace: a trace with trees survives save and load; a trace of
// the old format (no tree field) loads as before; a zero tree share is no
// mix; the flat gangs of a mixed trace keep their durations and sizes.
func TestTreeTrace(t *testing.T) {
	f, flat := generate(t, fabric.Spec{Kind: fabric.KindNVL72, Size: 8, RacksPerLeaf: 4}, 5, 300)
	mixed := treeTrace(t, f, 5, 300, 0.3)
	path := filepath.Join(t.TempDir(), "trace.yaml")
	if err := SaveTrace(path, mixed); err != nil {
		t.Fatal(err)
	}
	loaded, err := LoadTrace(path)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(mixed, loaded); diff != "" {
		t.Fatalf("trace after save and load (-want +got):\n%s", diff)
	}
	n := 0
	for i, g := range mixed.Gangs {
		if g.Tree == nil {
			if flat.Gangs[i].Duration != g.Duration || flat.Gangs[i].GPUs() != g.GPUs() {
				t.Fatalf("flat gang %d changed with trees mixed in: %+v, was %+v", g.ID, g, flat.Gangs[i])
			}
			continue
		}
		n++
	}
	if n < 60 || n > 120 {
		t.Errorf("%d of 300 jobs are trees at share 0.3", n)
	}
	none := treeTrace(t, f, 5, 300, 0)
	if diff := cmp.Diff(flat, none); diff != "" {
		t.Errorf("tree share 0 changed the trace (-want +got):\n%s", diff)
	}
	old := "config: {seed: 1, gangs: 1, load: 1, clusterGPUs: 8, gpusPerNode: 4, meanDuration: 60, sizes: [{gpus: 8, weight: 1}]}\n" +
		"gangs:\n- {id: 0, arrival: 0, duration: 60, pods: 2, gpusPerPod: 4}\n"
	if err := os.WriteFile(path, []byte(old), 0o644); err != nil {
		t.Fatal(err)
	}
	if tr, err := LoadTrace(path); err != nil || tr.Gangs[0] != (TraceGang{Duration: 60, Pods: 2, GPUsPerPod: 4}) {
		t.Errorf("old trace: %+v, %v", tr, err)
	}
	for name, bad := range map[string]string{
		"a tree with pods of its own": "- {id: 0, arrival: 0, duration: 60, pods: 2, gpusPerPod: 4, tree: {kind: training, name: j, children: [{name: s, pods: 1, gpusPerPod: 4}]}}\n",
		"an invalid tree":             "- {id: 0, arrival: 0, duration: 60, tree: {kind: training, name: j, children: [{name: s, pods: 0, gpusPerPod: 4}]}}\n",
	} {
		if err := os.WriteFile(path, []byte("gangs:\n"+bad), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := LoadTrace(path); err == nil {
			t.Errorf("%s: loaded", name)
		}
	}
}

// TestTreePolicies places one tree with every policy on a tiny fabric:
// rack a has 8 nodes, 4 of them full; rack b 2 free nodes; one leaf. The
// tree asks for the leaf, pg1 (1 pod) in one rack, pg2 (4 pods) in one
// rack, in that creation order (trees.TestBaselines works the baselines'
// nodes out).
func TestTreePolicies(t *testing.T) {
	f := tinyFabric(t, map[string]int{"a": 8, "b": 2}, map[string]int{"a-n00": 4, "a-n01": 4, "a-n02": 4, "a-n03": 4})
	g := TraceGang{ID: 1, Duration: 60, Tree: &trees.Spec{Kind: trees.KindTraining, Name: "job", TopologyKey: fabric.LabelLeaf, Children: []trees.Spec{
		{Name: "pg1", TopologyKey: fabric.LabelRack, Pods: 1, GPUsPerPod: 4},
		{Name: "pg2", TopologyKey: fabric.LabelRack, Pods: 4, GPUsPerPod: 4}}}}
	engine := []string{"b-n00", "a-n04", "a-n05", "a-n06", "a-n07"}
	want := map[string][]string{
		// The engine's search places pg2 (the larger) first, in a, the
		// only rack it fits; pg1 then in b.
		PolicyGPUFabric: engine, PolicyGPUFabricNVLink: engine, PolicyGPUFabricReserve: engine, PolicyGPUFabricFullest: engine,
		// Each pod on the first node with room.
		PolicyFirstFit: {"a-n04", "a-n05", "a-n06", "a-n07", "b-n00"},
		// pg1 goes to a, the rack most allocated after it; pg2 then fits
		// nowhere.
		PolicyTAS: nil,
		// One flat group in the leaf: the children's keys are not seen.
		PolicyBestFit: {"a-n04", "a-n05", "a-n06", "a-n07", "b-n00"},
	}
	got := map[string][]string{}
	ctx := context.Background()
	for _, name := range PolicyNames() {
		p, err := NewPolicy(name, f, PolicyOptions{Key: fabric.LabelLeaf})
		if err != nil {
			t.Fatal(err)
		}
		nodes := []int{-1, -1, -1, -1, -1}
		out, err := p.Place(ctx, NewCluster(f), g, nodes)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		got[name] = nodeNames(f, out)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("placements (-want +got):\n%s", diff)
	}
}

// TestTreeRails replays one inference service (frontend without GPUs,
// prefill and decode of 2 pods × 2 GPUs, coupled, in one NVLink domain) on
// one free rack of 4 nodes × 4 GPUs (rails 0–3). The baselines stack two
// pods a node and take the lowest free GPUs, so prefill gets rails {0,1}
// and {2,3} on one node and decode the same on the next: 2 of the 4 pod
// pairs match, the service is not on one rail set. gpufabric asks for
// coupled roles: every prefill and decode pod on one set of 2 rails, one
// pod a node. A segment split by first fit across racks counts out of its
// NVLink domain.
func TestTreeRails(t *testing.T) {
	f := tinyFabric(t, map[string]int{"a": 4}, nil)
	svc := &trees.Spec{Kind: trees.KindInference, Name: "svc", TopologyKey: topology.TopologyKeyNVLinkDomain, Children: []trees.Spec{
		{Name: "frontend", Role: trees.RoleFrontend, Pods: 1},
		{Name: "prefill", Role: trees.RolePrefill, Pods: 2, GPUsPerPod: 2, RailGroup: "kv"},
		{Name: "decode", Role: trees.RoleDecode, Pods: 2, GPUsPerPod: 2, RailGroup: "kv"}}}
	tr := &Trace{Gangs: []TraceGang{{ID: 0, Duration: 60, Tree: svc}}}
	chance := &trees.Stats{Trees: 1, Placed: 1, AsAsked: 1, Inference: 1, InferencePlaced: 1, InferenceAsAsked: 1,
		Couples: 1, Pairs: 4, PairsMatched: 2, InferenceWaits: []int64{0}}
	coupled := *chance
	coupled.CouplesMatched, coupled.PairsMatched = 1, 4
	for name, want := range map[string]*trees.Stats{PolicyTAS: chance, PolicyBestFit: chance, PolicyFirstFit: chance, PolicyGPUFabric: &coupled} {
		p, err := NewPolicy(name, f, PolicyOptions{Key: fabric.LabelLeaf})
		if err != nil {
			t.Fatal(err)
		}
		res, err := Run(context.Background(), f, tr, p, Options{Horizon: 10})
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(want, res.Trees); diff != "" {
			t.Errorf("%s: tree stats (-want +got):\n%s", name, diff)
		}
	}
	f2 := tinyFabric(t, map[string]int{"a": 2, "b": 2}, map[string]int{"a-n00": 4})
	job := &trees.Spec{Kind: trees.KindTraining, Name: "job", TopologyKey: fabric.LabelLeaf, Children: []trees.Spec{
		{Name: "s0", Role: trees.RoleSegment, TopologyKey: topology.TopologyKeyNVLinkDomain, Pods: 2, GPUsPerPod: 4}}}
	res, err := Run(context.Background(), f2, &Trace{Gangs: []TraceGang{{ID: 0, Duration: 60, Tree: job}}}, firstFit{}, Options{Horizon: 10})
	if err != nil {
		t.Fatal(err)
	}
	if s := res.Trees; s.Placed != 1 || s.AsAsked != 0 || s.Segments != 1 || s.SegmentsInDomain != 0 {
		t.Errorf("first fit over a-n01 and b-n00: %+v, want placed, not as asked, its segment out of one domain", *s)
	}
}

// TestTreeDeterministic: a mixed trace replays to the same report (trees
// included) twice and after save and load, and its table is written.
func TestTreeDeterministic(t *testing.T) {
	ctx := context.Background()
	f, err := fabric.Generate(fabric.Spec{Kind: fabric.KindNVL72, Size: 8, RacksPerLeaf: 4})
	if err != nil {
		t.Fatal(err)
	}
	tr := treeTrace(t, f, 3, 120, 0.4)
	path := filepath.Join(t.TempDir(), "trace.yaml")
	if err := SaveTrace(path, tr); err != nil {
		t.Fatal(err)
	}
	loaded, err := LoadTrace(path)
	if err != nil {
		t.Fatal(err)
	}
	names := []string{PolicyGPUFabric, PolicyFirstFit, PolicyTAS, PolicyBestFit}
	opts := PolicyOptions{Key: fabric.LabelLeaf}
	first, err := RunAll(ctx, f, tr, names, opts, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for name, trace := range map[string]*Trace{"same seed": treeTrace(t, f, 3, 120, 0.4), "loaded": loaded} {
		second, err := RunAll(ctx, f, trace, names, opts, Options{})
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(first, second, wallClock); diff != "" {
			t.Errorf("%s: report differs (-first +second):\n%s", name, diff)
		}
	}
	for _, r := range first.Results {
		if s := r.Trees; s == nil || s.Placed == 0 || s.Training == 0 || s.Inference == 0 {
			t.Fatalf("%s: tree stats %+v: want trees of both kinds placed", r.Policy, s)
		}
		if r.Policy == PolicyGPUFabric && (r.Trees.SegmentsInDomain != r.Trees.Segments || r.Trees.AsAsked != r.Trees.Placed) {
			t.Errorf("gpufabric: %+v: want every tree as asked, every segment in one NVLink domain", *r.Trees)
		}
	}
	var b bytes.Buffer
	if err := first.TreesMarkdown(&b); err != nil {
		t.Fatal(err)
	}
	if got := strings.Count(b.String(), "\n| "); got != len(names)+1 {
		t.Errorf("tree table has %d rows, want %d:\n%s", got, len(names)+1, b.String())
	}
	if _, err := Run(ctx, f, tr, NewEnginePolicy(f), Options{Failures: &Failures{}}); err == nil {
		t.Error("a failure run took tree jobs")
	}
}
