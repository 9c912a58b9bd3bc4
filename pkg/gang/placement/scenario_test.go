package placement_test

import (
	"context"
	"flag"
	"fmt"
	"github.com/gpufabric/gpufabric/pkg/gang/placement/scenario"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/yaml"

	"github.com/gpufabric/gpufabric/pkg/gang/placement"
	"github.com/gpufabric/gpufabric/pkg/gang/placement/index"
	"github.com/gpufabric/gpufabric/pkg/gang/placement/placementtest"
)

var update = flag.Bool("update", false, "rewrite testdata/scenarios/*.golden")

// outcome is the golden form of one gang's result.
type outcome struct {
	Gang          string   `json:"gang"`
	TopologyKey   string   `json:"topologyKey,omitempty"`
	Domain        string   `json:"domain,omitempty"`
	Leftover      *int     `json:"leftoverDevices,omitempty"`
	RailSets      *int     `json:"railSets,omitempty"`
	Spread        []string `json:"spread,omitempty"`
	Segments      string   `json:"segments,omitempty"`
	Pods          []string `json:"pods,omitempty"`
	Shared        []string `json:"shared,omitempty"`
	Unschedulable string   `json:"unschedulable,omitempty"`
}

func render(d *placement.Decision, u *placement.Unschedulable, gang string) outcome {
	if u != nil {
		return outcome{Gang: gang, Unschedulable: u.Message}
	}
	o := outcome{Gang: gang, TopologyKey: d.TopologyKey, Domain: d.Domain, Leftover: &d.Score.LeftoverDevices, RailSets: &d.Score.RailSets, Segments: d.SegmentSummary()}
	for _, ls := range d.Spread {
		if len(ls.Domains) < 2 {
			continue // only the levels the gang spans
		}
		parts := make([]string, len(ls.Domains))
		for i, dp := range ls.Domains {
			parts[i] = fmt.Sprintf("%s %d", dp.ID, dp.Pods)
		}
		o.Spread = append(o.Spread, ls.TopologyKey+": "+strings.Join(parts, ", "))
	}
	devices := map[string][]string{}
	for _, c := range d.Claims {
		var names []string
		for _, r := range c.Allocation.Devices.Results {
			names = append(names, r.Device)
		}
		if c.Shared {
			o.Shared = append(o.Shared, fmt.Sprintf("%s: %s/%s", c.Name, c.Allocation.Devices.Results[0].Pool, strings.Join(names, ",")))
			continue
		}
		devices[c.Pod] = append(devices[c.Pod], names...)
	}
	for _, p := range d.Pods {
		o.Pods = append(o.Pods, fmt.Sprintf("%s: %s [%s]", p.Name, p.Node, strings.Join(devices[p.Name], ",")))
	}
	return o
}

// runScenario places the gangs in order on one snapshot, assuming each
// decision, and checks every decision with placementtest.Checker.
func runScenario(t *testing.T, sc scenario.Scenario) []outcome {
	t.Helper()
	ctx := context.Background()
	b, snap := buildCompared(ctx, t, sc)
	checker := placementtest.NewChecker(b.Input)
	var out []outcome
	for _, g := range b.Gangs {
		d, u, err := placement.Place(ctx, b.Config, snap, g)
		if err != nil {
			t.Fatalf("gang %s: %v", g.Key(), err)
		}
		if d != nil {
			if err := checker.Check(g, d); err != nil {
				t.Errorf("gang %s: invalid decision: %v", g.Key(), err)
			}
			if err := placement.Assume(ctx, snap, g, d); err != nil {
				t.Fatal(err)
			}
		}
		out = append(out, render(d, u, g.Name))
	}
	return out
}

// readScenario reads a scenario file, strictly.
func readScenario(t *testing.T, file string) scenario.Scenario {
	t.Helper()
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var sc scenario.Scenario
	if err := yaml.UnmarshalStrict(raw, &sc); err != nil {
		t.Fatal(err)
	}
	return sc
}

func TestScenarios(t *testing.T) {
	files, err := filepath.Glob("testdata/scenarios/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no scenarios: %v", err)
	}
	for _, file := range files {
		name := strings.TrimSuffix(filepath.Base(file), ".yaml")
		t.Run(name, func(t *testing.T) {
			got, err := yaml.Marshal(runScenario(t, readScenario(t, file)))
			if err != nil {
				t.Fatal(err)
			}
			golden := strings.TrimSuffix(file, ".yaml") + ".golden"
			if *update {
				if err := os.WriteFile(golden, got, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run with -update)", err)
			}
			if diff := cmp.Diff(string(want), string(got)); diff != "" {
				t.Errorf("outcome differs from %s (-want +got):\n%s", golden, diff)
			}
		})
	}
}

// TestDeterministic places the same scenario twice on fresh snapshots.
func TestDeterministic(t *testing.T) {
	sc := readScenario(t, "testdata/scenarios/nvl72-gang.yaml")
	first := runScenario(t, sc)
	for range 3 {
		if diff := cmp.Diff(first, runScenario(t, sc)); diff != "" {
			t.Fatalf("second run differs (-first +again):\n%s", diff)
		}
	}
}

// TestPackOrderFullestNodes: with PackFullestNodes the 48-GPU gang of
// spread.yaml takes the fullest nodes in name order, over three NVLink
// domains instead of the two that least spread picks; an unknown pack
// order is refused.
func TestPackOrderFullestNodes(t *testing.T) {
	b, err := scenario.Build(readScenario(t, "testdata/scenarios/spread.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	spreadOf := func(order placement.PackOrder) []string {
		cfg := b.Config
		cfg.PackOrder = order
		snap, err := index.NewSnapshot(ctx, cfg.Index, b.Input)
		if err != nil {
			t.Fatal(err)
		}
		d, u, err := placement.Place(ctx, cfg, snap, b.Gangs[0])
		if err != nil || d == nil {
			t.Fatalf("%s: place: %v %+v", order, err, u)
		}
		return render(d, nil, "big").Spread
	}
	if diff := cmp.Diff([]string{"gpufabric.dev/nvlinkDomain: b 5, c 5, a 2"}, spreadOf(placement.PackFullestNodes)); diff != "" {
		t.Errorf("fullest nodes: spread (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"gpufabric.dev/nvlinkDomain: c 7, b 5"}, spreadOf(placement.PackLeastSpread)); diff != "" {
		t.Errorf("least spread: spread (-want +got):\n%s", diff)
	}
	cfg := b.Config
	cfg.PackOrder = "spread"
	snap, err := index.NewSnapshot(ctx, cfg.Index, b.Input)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := placement.Place(ctx, cfg, snap, b.Gangs[0]); err == nil || !strings.Contains(err.Error(), `pack order "spread"`) {
		t.Errorf("unknown pack order: error %v, want one naming it", err)
	}
}

// buildCompared builds sc and its snapshot for a test that compares the
// engine's results (goldens, brute force): with a one-minute Allocate
// timeout, so a loaded machine cannot turn a slow call into a refusal (the
// production timeout guards a scheduler, not a comparison).
func buildCompared(ctx context.Context, t *testing.T, sc scenario.Scenario) (*scenario.Built, *index.Snapshot) {
	t.Helper()
	b, err := scenario.Build(sc)
	if err != nil {
		t.Fatal(err)
	}
	return b, comparedSnapshot(ctx, t, b)
}

// comparedSnapshot is buildCompared's snapshot of an already built b.
func comparedSnapshot(ctx context.Context, t *testing.T, b *scenario.Built) *index.Snapshot {
	t.Helper()
	b.Config.Index.AllocateTimeout = time.Minute
	snap, err := index.NewSnapshot(ctx, b.Config.Index, b.Input)
	if err != nil {
		t.Fatal(err)
	}
	return snap
}
