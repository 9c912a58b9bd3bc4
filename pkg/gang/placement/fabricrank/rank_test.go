package fabricrank_test

import (
	"context"
	"strings"
	"testing"

	"github.com/gpufabric/gpufabric/pkg/gang/placement/fabricrank"
	"github.com/gpufabric/gpufabric/pkg/gang/placement/index"
	"github.com/gpufabric/gpufabric/pkg/gang/placement/scenario"
	"github.com/gpufabric/gpufabric/pkg/topology"
)

// TestOrder: domains a (1 sick node), b (healthy), c (2 sick nodes, by a
// degraded-NVLink GPU taint), d (healthy) of a level in best-fit order
// come back healthy first, each group in its order; Note and Sick say so.
func TestOrder(t *testing.T) {
	dom := func(id string, nodes int, tainted ...int) scenario.DomainSpec {
		return scenario.DomainSpec{ID: id, Nodes: nodes, GPUsPerNode: 4, DeviceTaint: topology.TaintNVLinkDegraded, TaintedNodes: tainted}
	}
	b, err := scenario.Build(scenario.Scenario{Domains: []scenario.DomainSpec{dom("a", 2, 1), dom("b", 3), dom("c", 4, 0, 3), dom("d", 5)}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	snap, err := index.NewSnapshot(ctx, b.Config.Index, b.Input)
	if err != nil {
		t.Fatal(err)
	}
	li, err := snap.LevelIndex(ctx, snap.Level(topology.TopologyKeyNVLinkDomain), topology.GPUDeviceClass)
	if err != nil {
		t.Fatal(err)
	}
	ids := func(es []*index.DomainEntry) string {
		var out []string
		for _, e := range es {
			out = append(out, e.Domain().ID)
		}
		return strings.Join(out, ",")
	}
	entries := li.From(1)
	ordered, healthy := fabricrank.Order(snap, entries)
	if got := ids(ordered); got != "b,d,a,c" || healthy != 2 {
		t.Errorf("Order(%s) = %s with %d healthy, want b,d,a,c with 2", ids(entries), got, healthy)
	}
	if got := ids(entries); got != "a,b,c,d" {
		t.Errorf("Order changed its input: %s", got)
	}
	if n := fabricrank.Sick(snap, ordered[3].Domain()); n != 8 {
		t.Errorf("c has %d sick devices, want 8 (two nodes × 4 tainted GPUs)", n)
	}
	if note := fabricrank.Note(snap, ordered, healthy, 0); !strings.Contains(note, "chose b") || !strings.Contains(note, "over 1 better-fitting") {
		t.Errorf("note for b: %q, want it chosen over a", note)
	}
	if note := fabricrank.Note(snap, ordered, healthy, 3); !strings.Contains(note, "only domains with link errors") || !strings.Contains(note, "c has 8") {
		t.Errorf("note for c: %q", note)
	}
	if note := fabricrank.Note(snap, ordered, -1, 0); note != "" {
		t.Errorf("unranked gang: note %q, want none", note)
	}
	healthyOnly := []*index.DomainEntry{entries[1], entries[3]}
	if got, n := fabricrank.Order(snap, healthyOnly); n != 2 || &got[0] != &healthyOnly[0] {
		t.Errorf("all healthy: %d healthy, want 2 and the input itself", n)
	}
}
