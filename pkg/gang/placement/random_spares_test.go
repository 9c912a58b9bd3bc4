package placement_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"testing"

	"github.com/gpufabric/gpufabric/pkg/gang/placement"
	"github.com/gpufabric/gpufabric/pkg/gang/placement/index"
	"github.com/gpufabric/gpufabric/pkg/gang/placement/placementtest"
	"github.com/gpufabric/gpufabric/pkg/gang/placement/scenario"
	"github.com/gpufabric/gpufabric/pkg/gang/placement/spares"
)

// randomSpares is a random spare policy: 1 or 2 nodes per NVLink domain or
// per rack.
func randomSpares(r *rand.Rand) spares.Policy {
	p := spares.Policy{PerDomain: 1 + r.IntN(2)}
	if r.IntN(2) == 0 {
		p.Level = "rack"
	}
	return p
}

// keptNodes are the nodes the policy keeps, computed from the brute
// force's view: per domain of the level, the last PerDomain (by name) of
// the nodes with every GPU free.
func keptNodes(sc scenario.Scenario, nodes []bfNode, p spares.Policy) map[string]bool {
	gpus := map[string]int{}
	for _, d := range sc.Domains {
		gpus[d.ID] = d.GPUsPerNode
	}
	free := map[string][]string{}
	i := 0
	for _, d := range sc.Domains {
		for k := range d.Nodes {
			n := nodes[i]
			i++
			if n.freeGPUs != gpus[n.domain] {
				continue
			}
			group := n.domain
			if p.Level == "rack" {
				group = n.rack
			}
			free[group] = append(free[group], scenario.NodeName(d.ID, k))
		}
	}
	kept := map[string]bool{}
	for _, names := range free {
		sort.Strings(names)
		for _, n := range names[max(0, len(names)-p.PerDomain):] {
			kept[n] = true
		}
	}
	return kept
}

// TestRandomSparesVsBruteForce: with spares kept, a new homogeneous gang
// is placed iff brute force places it on the cluster without the kept
// nodes (the check neither refuses a gang that fits around the spares nor
// places one that needs them), and no placement leaves a domain fewer
// wholly free nodes than min(kept, before).
func TestRandomSparesVsBruteForce(t *testing.T) {
	ctx := context.Background()
	r := rand.New(rand.NewPCG(29, 2))
	cases := 400
	if testing.Short() {
		cases = 100
	}
	placed, refusedBySpares := 0, 0
	for i := range cases {
		sc, nodes := randomCase(r, 8, false)
		sc.Spares = randomSpares(r)
		kept := keptNodes(sc, nodes, sc.Spares)
		without := make([]bfNode, len(nodes))
		k := 0
		for _, d := range sc.Domains {
			for j := range d.Nodes {
				without[k] = nodes[k]
				if kept[scenario.NodeName(d.ID, j)] {
					without[k].freeGPUs, without[k].freeMilliCPU = 0, 0
				}
				k++
			}
		}
		b, snap := buildCompared(ctx, t, sc)
		before := wholly(snap, sc.Spares.Key())
		d, u, err := placement.Place(ctx, b.Config, snap, b.Gangs[0])
		if err != nil {
			t.Fatalf("case %d: %v", i, err)
		}
		want := bruteForce(sc.Gangs[0], without)
		if got := d != nil; got != want {
			t.Fatalf("case %d: placed = %v, brute force without the spares %v\nscenario: %+v\nkept: %v\nunschedulable: %+v", i, got, want, sc, kept, u)
		}
		if d == nil {
			if bruteForce(sc.Gangs[0], nodes) {
				refusedBySpares++
			}
			continue
		}
		placed++
		if err := placementtest.NewChecker(b.Input).Check(b.Gangs[0], d); err != nil {
			t.Fatalf("case %d: invalid decision: %v", i, err)
		}
		if err := assumeAndCheckSpares(ctx, snap, b.Gangs[0], d, sc.Spares, before); err != nil {
			t.Fatalf("case %d: %v\nscenario: %+v", i, err, sc)
		}
	}
	if refusedBySpares == 0 || placed == 0 {
		t.Errorf("%d placed, %d refused only for the spares: the cases do not exercise the check", placed, refusedBySpares)
	}
	t.Logf("%d of %d placed; %d refused that would fit without spares", placed, cases, refusedBySpares)
}

// TestRandomSparesKept: heterogeneous and segmented gangs (multi-level,
// the joint device search, segments), three after another on one snapshot,
// never leave a domain of the spare level fewer wholly free nodes than
// min(PerDomain, before); late members (a replacement) may.
func TestRandomSparesKept(t *testing.T) {
	ctx := context.Background()
	r := rand.New(rand.NewPCG(30, 2))
	cases := 150
	if testing.Short() {
		cases = 50
	}
	placed, took := 0, 0
	for i := range cases {
		var sc scenario.Scenario
		if i%2 == 0 {
			sc, _ = randomHeteroCase(r, 8)
		} else {
			sc, _ = randomSegmentCase(r, 8)
		}
		sc.Spares = randomSpares(r)
		g := sc.Gangs[0]
		for k := 1; k < 3; k++ {
			again := g
			again.Name = fmt.Sprintf("%s-%d", g.Name, k)
			sc.Gangs = append(sc.Gangs, again)
		}
		b, snap := buildCompared(ctx, t, sc)
		for _, gang := range b.Gangs {
			before := wholly(snap, sc.Spares.Key())
			d, _, err := placement.Place(ctx, b.Config, snap, gang)
			if err != nil {
				t.Fatalf("case %d: %v", i, err)
			}
			if d == nil {
				continue
			}
			placed++
			if err := assumeAndCheckSpares(ctx, snap, gang, d, sc.Spares, before); err != nil {
				t.Fatalf("case %d gang %s: %v\nscenario: %+v", i, gang.Name, err, sc)
			}
		}
		// A replacement joining the last placed node's domain may take a
		// spare: count that it sometimes does, so the check above is not
		// vacuous for a guard that hides nothing.
		late := b.Gangs[0]
		late.BoundNodes = []string{snap.Nodes()[0].Name()}
		before := wholly(snap, sc.Spares.Key())
		if d, _, err := placement.Place(ctx, b.Config, snap, late); err == nil && d != nil {
			if assumeAndCheckSpares(ctx, snap, late, d, sc.Spares, before) != nil {
				took++
			}
		}
	}
	if placed == 0 || took == 0 {
		t.Errorf("%d new gangs placed, %d replacements took a spare: the cases do not exercise the check", placed, took)
	}
	t.Logf("%d new gangs placed; %d replacements took a spare", placed, took)
}

// wholly counts the wholly free nodes per domain of the level.
func wholly(snap *index.Snapshot, key string) map[string]int {
	out := map[string]int{}
	for _, d := range snap.Level(key).Domains {
		c := spares.CountDomain(d, 0, func(n string) spares.NodeGPUs { return spares.OfSnapshotNode(snap.Node(n)) })
		out[d.ID] = len(c.Free)
	}
	return out
}

// assumeAndCheckSpares assumes the decision and checks that every domain
// keeps min(PerDomain, before) wholly free nodes.
func assumeAndCheckSpares(ctx context.Context, snap *index.Snapshot, g *placement.Gang, d *placement.Decision, p spares.Policy, before map[string]int) error {
	if err := placement.Assume(ctx, snap, g, d); err != nil {
		return err
	}
	after := wholly(snap, p.Key())
	ids := make([]string, 0, len(before))
	for id := range before {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		if want := min(p.PerDomain, before[id]); after[id] < want {
			return fmt.Errorf("domain %s (%s): %d wholly free nodes after the gang, want at least %d (%d before)", id, p.Key(), after[id], want, before[id])
		}
	}
	return nil
}
