package sim

import (
	"bytes"
	"context"
	"encoding/xml"
	"errors"
	"io"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/gpufabric/gpufabric/pkg/sim/fabric"
)

func generate(t testing.TB, spec fabric.Spec, seed uint64, gangs int) (*fabric.Fabric, *Trace) {
	t.Helper()
	f, err := fabric.Generate(spec)
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultTraceConfig(seed, f)
	if gangs > 0 {
		cfg.Gangs = gangs
	}
	tr, err := GenerateTrace(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return f, tr
}

// wallClock are the Result fields that are not deterministic.
var wallClock = cmpopts.IgnoreFields(Result{}, "Latencies", "SyncTime", "TreeLatencies")

func TestDeterministic(t *testing.T) {
	ctx := context.Background()
	f, tr := generate(t, fabric.Spec{Kind: fabric.KindNVL72, Size: 8, RacksPerLeaf: 4}, 7, 200)
	path := filepath.Join(t.TempDir(), "trace.yaml")
	if err := SaveTrace(path, tr); err != nil {
		t.Fatal(err)
	}
	loaded, err := LoadTrace(path)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(tr, loaded); diff != "" {
		t.Fatalf("trace after save and load (-want +got):\n%s", diff)
	}
	_, again := generate(t, fabric.Spec{Kind: fabric.KindNVL72, Size: 8, RacksPerLeaf: 4}, 7, 200)
	opts := PolicyOptions{Key: fabric.LabelLeaf}
	first, err := RunAll(ctx, f, tr, PolicyNames(), opts, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for name, trace := range map[string]*Trace{"same seed": again, "loaded": loaded} {
		second, err := RunAll(ctx, f, trace, PolicyNames(), opts, Options{})
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(first, second, wallClock); diff != "" {
			t.Errorf("%s: report differs (-first +second):\n%s", name, diff)
		}
	}
	if first.Results[0].FirstRefusal == nil {
		t.Errorf("trace too light: gpufabric never refused a gang")
	}
}

// TestDefaultTraceTargets checks the issues' targets on the default trace
// (seed 1, 32 NVL72 domains): gpufabric places in one NVLink domain every
// gang for which one had room; with the NVLink domain required for gangs
// that fit one, 100% of those land in one. Pack orders (issue 13): with
// --pack-order=fullest-nodes the engine allocates at least 97% of the GPUs
// before refusing a gang that fits in the free GPUs; the default least
// spread puts the gangs larger than one NVLink domain over fewer domains
// and adjacent ranks in one rack more often, for at most 5 points of that
// allocation (the trade-off measured in docs/benchmarks.md).
func TestDefaultTraceTargets(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the default trace")
	}
	f, tr := generate(t, fabric.Spec{Kind: fabric.KindNVL72, Size: 32}, 1, 0)
	rep, err := RunAll(context.Background(), f, tr, []string{PolicyGPUFabric, PolicyGPUFabricNVLink, PolicyGPUFabricFullest}, PolicyOptions{Key: fabric.LabelLeaf}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	eng, nvl, full := rep.Results[0], rep.Results[1], rep.Results[2]
	if eng.FirstRefusal == nil || full.FirstRefusal == nil {
		t.Fatalf("default trace never reaches a refusal")
	}
	if eng.RoomInDomain != eng.Room {
		t.Errorf("gpufabric: %d of %d gangs with room in an NVLink domain placed in one", eng.RoomInDomain, eng.Room)
	}
	if nvl.FitDomainInDomain != nvl.FitDomain {
		t.Errorf("nvlink required: %d of %d gangs that fit a domain placed in one", nvl.FitDomainInDomain, nvl.FitDomain)
	}
	if a := full.FirstRefusal.AllocatedPct; a < 97 {
		t.Errorf("fullest nodes: first refusal at %.1f%% allocation, want ≥ 97%%: %+v", a, *full.FirstRefusal)
	}
	es, fs := eng.Summary(), full.Summary()
	if es.BigDomains >= fs.BigDomains || es.RankSameRackPct <= fs.RankSameRackPct {
		t.Errorf("least spread: %.2f NVLink domains per gang larger than one, %.1f%% adjacent ranks in one rack; fullest nodes %.2f, %.1f%%: want fewer domains and more ranks together",
			es.BigDomains, es.RankSameRackPct, fs.BigDomains, fs.RankSameRackPct)
	}
	if a, b := eng.FirstRefusal.AllocatedPct, full.FirstRefusal.AllocatedPct; a < b-5 {
		t.Errorf("least spread: first refusal at %.1f%% allocation, fullest nodes %.1f%%: want at most 5 points less", a, b)
	}
}

// TestFirstFitTeardown: a gang that first fit can only place in part holds
// two nodes until the timeout tears it down, again and again.
func TestFirstFitTeardown(t *testing.T) {
	f := tinyFabric(t, map[string]int{"a": 3}, nil)
	tr := &Trace{Gangs: []TraceGang{
		{ID: 0, Arrival: 0, Duration: 10000, Pods: 1, GPUsPerPod: 4},
		{ID: 1, Arrival: 1, Duration: 100, Pods: 3, GPUsPerPod: 4},
		{ID: 2, Arrival: 2000, Duration: 100, Pods: 1, GPUsPerPod: 4},
	}}
	type outcome struct {
		Placed, Teardowns, Refusals int
		Last                        Sample
	}
	want := map[string]outcome{
		PolicyFirstFit:  {Placed: 1, Teardowns: 3, Last: Sample{T: 1, Busy: 4, Held: 8}}, // torn down and re-placed in the same instants
		PolicyGPUFabric: {Placed: 2, Last: Sample{T: 2000, Busy: 8}},
	}
	got := map[string]outcome{}
	for name := range want {
		p, err := NewPolicy(name, f, PolicyOptions{})
		if err != nil {
			t.Fatal(err)
		}
		res, err := Run(context.Background(), f, tr, p, Options{})
		if err != nil {
			t.Fatal(err)
		}
		got[name] = outcome{res.Placed, res.Teardowns, res.Refusals, res.Series[len(res.Series)-1]}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("outcomes (-want +got):\n%s", diff)
	}
}

func TestReportOutputs(t *testing.T) {
	f, tr := generate(t, fabric.Spec{Kind: fabric.KindHGX, Size: 64, NodesPerRack: 4, RacksPerLeaf: 4}, 3, 120)
	rep, err := RunAll(context.Background(), f, tr, PolicyNames(), PolicyOptions{Key: fabric.LabelRack}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	var md, svg bytes.Buffer
	if err := rep.Markdown(&md); err != nil {
		t.Fatal(err)
	}
	if err := rep.SVG(&svg); err != nil {
		t.Fatal(err)
	}
	if rows := strings.Count(md.String(), "\n| "); rows != len(PolicyNames())+1 {
		t.Errorf("markdown has %d table rows, want header + %d:\n%s", rows, len(PolicyNames()), md.String())
	}
	lines := 0
	dec := xml.NewDecoder(&svg)
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("svg: %v", err)
		}
		if se, ok := tok.(xml.StartElement); ok && se.Name.Local == "polyline" {
			lines++
		}
	}
	if lines < len(PolicyNames()) {
		t.Errorf("svg has %d polylines, want at least %d", lines, len(PolicyNames()))
	}
}

func TestBuckets(t *testing.T) {
	r := &Result{Horizon: 30, Series: []Sample{{T: 0, Busy: 3}, {T: 10, Busy: 6, Held: 3}, {T: 25, Busy: 0}}}
	busy, held := r.buckets(3)
	if diff := cmp.Diff([]float64{3, 6, 3}, busy); diff != "" {
		t.Errorf("busy (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]float64{3, 9, 4.5}, held); diff != "" {
		t.Errorf("held (-want +got):\n%s", diff)
	}
}

// TestRankPairs: adjacent ranks are counted on one node and in one rack;
// a one-pod gang has no pairs.
func TestRankPairs(t *testing.T) {
	rack := func(n int) int { return []int{0, 0, 1, -1}[n] }
	var r Result
	r.ranks([]int{0, 0, 1, 2, 3, 3}, rack)
	r.ranks([]int{2}, rack)
	// Pairs of nodes (0,0) (0,1) (1,2) (2,3) (3,3): one node for (0,0) and
	// (3,3); one rack for (0,0) and (0,1) (node 3 has no rack).
	want := [3]int{5, 2, 2}
	if got := [3]int{r.RankPairs, r.RankSameNode, r.RankSameRack}; got != want {
		t.Errorf("pairs, same node, same rack = %v, want %v", got, want)
	}
}

// TestSpreadCounts: racks per placed gang, and NVLink domains of gangs
// larger than one domain against the fewest possible.
func TestSpreadCounts(t *testing.T) {
	rack := func(n int) int { return []int{0, 0, 1, 2}[n] }
	domain := func(n int) int { return []int{0, 0, 1, 2}[n] }
	var r Result
	r.Placed = 2
	// 8 GPUs (4 pods × 2) with 4-GPU domains: spans 3 domains, fewest 2.
	r.spread(TraceGang{Pods: 4, GPUsPerPod: 2}, []int{0, 1, 2, 3}, rack, domain, 4)
	// 2 GPUs: not larger than a domain; one rack.
	r.spread(TraceGang{Pods: 1, GPUsPerPod: 2}, []int{2}, rack, domain, 4)
	want := [4]int{4, 1, 3, 2}
	if got := [4]int{r.RacksUsed, r.Big, r.BigDomains, r.BigMinDomains}; got != want {
		t.Errorf("racks, big gangs, their domains, fewest = %v, want %v", got, want)
	}
	s := r.Summary()
	if s.RacksPerGang != 2 || s.BigDomains != 3 || s.BigMinDomains != 2 {
		t.Errorf("summary racks/gang %v, big domains %v (fewest %v), want 2, 3 (2)", s.RacksPerGang, s.BigDomains, s.BigMinDomains)
	}
}
