package sim

import (
	"bytes"
	"context"
	"flag"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/gpufabric/gpufabric/pkg/sim/fabric"
	"github.com/gpufabric/gpufabric/pkg/sim/failures"
)

var update = flag.Bool("update", false, "rewrite the golden files of the goodput report")

// noFailureCosts is the model with the default costs and no random
// failures (the tests script their own).
func scriptedModel() failures.Model {
	m := failures.Default()
	m.Scale = 0
	return m
}

// runScripted replays tr on f with one failure policy and a scripted
// failure schedule.
func runScripted(t *testing.T, f *fabric.Fabric, tr *Trace, name string, popt FailurePolicyOptions, sched []failures.Event, horizon int64) *Goodput {
	t.Helper()
	p, rec, err := NewFailurePolicy(name, f, popt)
	if err != nil {
		t.Fatal(err)
	}
	res, err := Run(context.Background(), f, tr, p, Options{Horizon: horizon,
		Failures: &Failures{Model: scriptedModel(), Schedule: sched, Recovery: rec}})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return res.Goodput
}

// counts are the Goodput counters a scenario checks.
type counts struct {
	Interruptions, InPlace, InPlaceRestarts, WholeRestarts, NoReplacement, Failed, DomainLost, Completed int
}

func countsOf(g *Goodput) counts {
	return counts{g.Interruptions, g.InPlace, g.InPlaceRestarts, g.WholeRestarts, g.NoReplacement, g.Failed, g.DomainLost, g.Completed}
}

// TestRecoveryDecisions: one gang of two 4-GPU pods in NVLink domain a
// loses node a-n00 (index 0) to a hardware failure at t=100; each policy
// recovers as it says, with room in the domain and without.
func TestRecoveryDecisions(t *testing.T) {
	hw := []failures.Event{{T: 100, Node: 0, Hardware: true}}
	gang := TraceGang{ID: 0, Arrival: 0, Duration: 7200, Pods: 2, GPUsPerPod: 4}
	tests := []struct {
		name  string
		nodes map[string]int
		trace []TraceGang
		opt   FailurePolicyOptions
		want  map[string]counts
	}{{
		name:  "a free node in the domain: replaced in place, except by the restart policy",
		nodes: map[string]int{"a": 3, "b": 1},
		trace: []TraceGang{gang},
		want: map[string]counts{
			FailGPUFabricSpares:  {Interruptions: 1, InPlace: 1, Completed: 1},
			FailGPUFabricReplace: {Interruptions: 1, InPlace: 1, Completed: 1},
			FailGPUFabricRestart: {Interruptions: 1, WholeRestarts: 1, Completed: 1},
			FailKueueReplace:     {Interruptions: 1, InPlace: 1, Completed: 1},
			FailRestartAnywhere:  {Interruptions: 1, InPlace: 1, Completed: 1},
		},
	}, {
		name:  "domain full: gpufabric restarts whole past the bound, Kueue and kube replace outside the domain",
		nodes: map[string]int{"a": 2, "b": 3},
		trace: []TraceGang{gang, {ID: 1, Arrival: 1, Duration: 100000, Pods: 1, GPUsPerPod: 4}},
		want: map[string]counts{
			// a's spare (a-n01) keeps the two-pod gang out of a; the
			// one-pod gang on a-n00 is replaced onto the spare
			FailGPUFabricSpares:  {Interruptions: 1, InPlace: 1, Completed: 1},
			FailGPUFabricReplace: {Interruptions: 1, WholeRestarts: 1, NoReplacement: 1, Completed: 1},
			FailGPUFabricRestart: {Interruptions: 1, WholeRestarts: 1, Completed: 1},
			FailKueueReplace:     {Interruptions: 1, InPlace: 1, DomainLost: 1, Completed: 1},
			FailRestartAnywhere:  {Interruptions: 1, InPlace: 1, DomainLost: 1, Completed: 1},
		},
	}, {
		name:  "domain full, member-loss policy Wait: keeps waiting",
		nodes: map[string]int{"a": 2, "b": 3},
		trace: []TraceGang{gang, {ID: 1, Arrival: 1, Duration: 100000, Pods: 1, GPUsPerPod: 4}},
		opt:   FailurePolicyOptions{OnLoss: OnLossWait},
		want:  map[string]counts{FailGPUFabricReplace: {Interruptions: 1, NoReplacement: 1}},
	}, {
		name:  "domain full, member-loss policy Fail: the gang fails",
		nodes: map[string]int{"a": 2, "b": 3},
		trace: []TraceGang{gang, {ID: 1, Arrival: 1, Duration: 100000, Pods: 1, GPUsPerPod: 4}},
		opt:   FailurePolicyOptions{OnLoss: OnLossFail},
		want:  map[string]counts{FailGPUFabricReplace: {Interruptions: 1, NoReplacement: 1, Failed: 1}},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := tinyFabric(t, tt.nodes, nil)
			got := map[string]counts{}
			for name := range tt.want {
				got[name] = countsOf(runScripted(t, f, &Trace{Gangs: tt.trace}, name, tt.opt, hw, 20000))
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("outcomes (-want +got):\n%s", diff)
			}
		})
	}
}

// TestGoodputAccounting: the GPU-hours of one replaced gang and of one
// restarted in place by a non-hardware interruption.
func TestGoodputAccounting(t *testing.T) {
	f := tinyFabric(t, map[string]int{"a": 3}, nil)
	tr := &Trace{Gangs: []TraceGang{{ID: 0, Arrival: 0, Duration: 7200, Pods: 2, GPUsPerPod: 4}}}
	approx := cmpopts.EquateApprox(0, 1e-9)
	for name, tt := range map[string]struct {
		sched []failures.Event
		want  Goodput
	}{
		// lost at 100 before any checkpoint: 100 s of 8 GPUs redone, 600 s
		// of restart; done at 100 + 600 + 7200 = 7900 s.
		"hardware, replaced in place": {sched: []failures.Event{{T: 100, Node: 0, Hardware: true}}, want: Goodput{
			CapacityGPUh: 12 * 20000.0 / 3600, UsefulGPUh: 16, ReworkGPUh: 800.0 / 3600, RestartGPUh: 4800.0 / 3600,
			NodeFailures: 1, Interruptions: 1, InPlace: 1, Completed: 1, Recoveries: []int64{0},
		}},
		// at 2000 the 1800 s checkpoint is kept, 200 s redone.
		"software, restarted in place": {sched: []failures.Event{{T: 2000, Node: 1}}, want: Goodput{
			CapacityGPUh: 12 * 20000.0 / 3600, UsefulGPUh: 16, ReworkGPUh: 1600.0 / 3600, RestartGPUh: 4800.0 / 3600,
			Interruptions: 1, InPlaceRestarts: 1, Completed: 1,
		}},
		"an idle node fails": {sched: []failures.Event{{T: 100, Node: 2, Hardware: true}}, want: Goodput{
			CapacityGPUh: 12 * 20000.0 / 3600, UsefulGPUh: 16, NodeFailures: 1, Completed: 1,
		}},
	} {
		got := runScripted(t, f, tr, FailGPUFabricReplace, FailurePolicyOptions{}, tt.sched, 20000)
		if diff := cmp.Diff(&tt.want, got, approx); diff != "" {
			t.Errorf("%s (-want +got):\n%s", name, diff)
		}
	}
	// Waiting: the gang holds its other pod's 4 GPUs from 100 to the
	// horizon.
	f2 := tinyFabric(t, map[string]int{"a": 2, "b": 3}, nil)
	tr2 := &Trace{Gangs: []TraceGang{tr.Gangs[0], {ID: 1, Arrival: 1, Duration: 100000, Pods: 1, GPUsPerPod: 4}}}
	g := runScripted(t, f2, tr2, FailGPUFabricReplace, FailurePolicyOptions{OnLoss: OnLossWait}, []failures.Event{{T: 100, Node: 0, Hardware: true}}, 20000)
	if want := 4 * (20000 - 100) / 3600.0; math.Abs(g.WaitGPUh-want) > 1e-9 {
		t.Errorf("Wait: %g GPU-h waiting, want %g", g.WaitGPUh, want)
	}
	if diff := cmp.Diff([]int64{20000 - 100}, g.Recoveries); diff != "" {
		t.Errorf("Wait: recoveries (-want +got):\n%s", diff)
	}
}

// TestReplacementNode: where each recovery puts a lost pod.
func TestReplacementNode(t *testing.T) {
	f := tinyFabric(t, map[string]int{"a": 2, "b": 2}, map[string]int{"a-n01": 4, "b-n00": 2})
	c := NewCluster(f)
	leaf := f.Level(fabric.LabelLeaf)
	c.Free[0] = 0 // a-n00 is the failed node
	tests := []struct {
		rec  Recovery
		gpus int
		want string // "" for none
	}{
		{Recovery{Kind: RecoverInPlace}, 4, ""},                      // a is full
		{Recovery{Kind: RecoverKueue, BlockLevel: leaf}, 4, "b-n01"}, // the block
		{Recovery{Kind: RecoverKueue, BlockLevel: 0}, 4, ""},         // block = NVLink domain: fail fast
		{Recovery{Kind: RecoverAnywhere}, 2, "b-n00"},                // first node with room
		{Recovery{Kind: RecoverRestart}, 4, ""},
	}
	for _, tt := range tests {
		got := ""
		if n := c.replacement(tt.rec, 0, tt.gpus); n >= 0 {
			got = f.NodeNames[n]
		}
		if got != tt.want {
			t.Errorf("%+v, %d GPUs: %q, want %q", tt.rec, tt.gpus, got, tt.want)
		}
	}
	c.Free[f.NodeIndex["a-n01"]] = 4
	if n := c.replacement(Recovery{Kind: RecoverInPlace}, 0, 4); n < 0 || f.NodeNames[n] != "a-n01" {
		t.Errorf("in place with a-n01 free: %d", n)
	}
}

// TestSpares: the n highest wholly free up nodes of each domain are hidden
// from new gangs, and the down nodes.
func TestSpares(t *testing.T) {
	f := tinyFabric(t, map[string]int{"a": 3, "b": 2}, map[string]int{"a-n02": 1})
	c := NewCluster(f)
	down := make([]bool, len(c.Free))
	down[f.NodeIndex["b-n01"]] = true
	names := func(h []bool) []string {
		var out []string
		for i, x := range h {
			if x {
				out = append(out, f.NodeNames[i])
			}
		}
		return out
	}
	for spares, want := range map[int][]string{
		0: {"b-n01"},
		1: {"a-n01", "b-n00", "b-n01"}, // a-n02 is not wholly free
		2: {"a-n00", "a-n01", "b-n00", "b-n01"},
	} {
		if diff := cmp.Diff(want, names(c.hidden(down, spares))); diff != "" {
			t.Errorf("%d spares (-want +got):\n%s", spares, diff)
		}
	}
}

// TestGoodputGolden: the goodput report of a small trace at 100× the
// published rate, against testdata/goodput.golden (go test -update
// rewrites it); the same seeds give the same report.
func TestGoodputGolden(t *testing.T) {
	f, tr := generate(t, fabric.Spec{Kind: fabric.KindNVL72, Size: 4, RacksPerLeaf: 2}, 3, 80)
	cfg := FailureConfig{Model: failures.Default(), Seed: 5, Policy: FailurePolicyOptions{Key: fabric.LabelLeaf}}
	cfg.Model.Scale = 200
	rep, err := RunGoodput(context.Background(), f, tr, FailurePolicyNames(), cfg, Options{})
	if err != nil {
		t.Fatal(err)
	}
	again, err := RunGoodput(context.Background(), f, tr, FailurePolicyNames(), cfg, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(rep, again, wallClock); diff != "" {
		t.Errorf("two runs differ (-first +second):\n%s", diff)
	}
	var b bytes.Buffer
	if err := rep.Markdown(&b); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join("testdata", "goodput.golden")
	if *update {
		if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(string(want), b.String()); diff != "" {
		t.Errorf("report (-golden +got):\n%s", diff)
	}
	hit := 0
	for _, r := range rep.Results {
		hit += r.Goodput.Interruptions
	}
	if hit == 0 {
		t.Errorf("no job was hit: the golden trace tests nothing")
	}
}
