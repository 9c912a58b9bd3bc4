package index_test

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/gpufabric/gpufabric/pkg/gang/placement"
	"github.com/gpufabric/gpufabric/pkg/gang/placement/index"
	"github.com/gpufabric/gpufabric/pkg/gang/placement/scenario"
)

// TestRollbackRestoresTheSnapshot: gangs placed and assumed after a Mark
// (nested marks, anti-affinity and fabric channels among them) leave no
// trace once rolled back: the same node state, cluster allocations and
// level indexes, and the same Place answers, as a snapshot that never saw
// them; an inner mark rolled back and the outer one released keep exactly
// the outer gangs, as a fresh snapshot with those assumed.
func TestRollbackRestoresTheSnapshot(t *testing.T) {
	ctx := context.Background()
	probes := []scenario.GangSpec{
		{Name: "probe-a", Pods: 2, GPUsPerPod: 2},
		{Name: "probe-b", Pods: 5, GPUsPerPod: 4, TopologyKey: "rack"},
		{Name: "probe-d", Pods: 3, GPUsPerPod: 1, FabricClaim: true, OnePerNode: true},
	}
	for seed := range uint64(8) {
		w := newCacheWorld(t, seed)
		snap, _ := w.snapshot(ctx, nil)
		keys := index.LevelKeys(snap)
		before := digest(ctx, t, snap, keys)
		answers := placeAll(ctx, t, w, snap, probes)

		outer := snap.Mark()
		kept := w.placeRandom(ctx, snap, 3)
		inner := snap.Mark()
		w.placeRandom(ctx, snap, 4)
		if err := snap.Rollback(ctx, inner); err != nil {
			t.Fatal(err)
		}
		// Only the outer gangs: as a fresh snapshot with them assumed.
		fresh, _ := w.snapshot(ctx, nil)
		for _, pg := range kept {
			if err := placement.Assume(ctx, fresh, pg.Gang, pg.Decision); err != nil {
				t.Fatal(err)
			}
		}
		if diff := cmp.Diff(digest(ctx, t, fresh, keys), digest(ctx, t, snap, keys)); diff != "" {
			t.Fatalf("seed %d: after the inner rollback (-want +got):\n%s", seed, diff)
		}
		if err := snap.Rollback(ctx, outer); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(before, digest(ctx, t, snap, keys)); diff != "" {
			t.Fatalf("seed %d: after the outer rollback (-before +after):\n%s", seed, diff)
		}
		if diff := cmp.Diff(answers, placeAll(ctx, t, w, snap, probes), cmpopts.IgnoreFields(placement.Stats{}, "MaxAllocate")); diff != "" {
			t.Fatalf("seed %d: Place answers differ after the rollback (-before +after):\n%s", seed, diff)
		}
		if err := snap.Rollback(ctx, outer); err == nil {
			t.Errorf("seed %d: a second rollback to an ended mark succeeded", seed)
		}
		// Released: the changes stay, and nothing is recorded any more.
		m := snap.Mark()
		w.placeRandom(ctx, snap, 2)
		snap.Release(m)
		if diff := cmp.Diff(before, digest(ctx, t, snap, keys)); diff == "" {
			t.Errorf("seed %d: the released gangs left no trace", seed)
		}
	}
}

// placeRandom places n random gangs on snap, assuming each one placed.
func (w *cacheWorld) placeRandom(ctx context.Context, snap *index.Snapshot, n int) []*placedGang {
	var out []*placedGang
	for range n {
		spec := w.randomSpec()
		spec.OnePerNode = w.r.IntN(3) == 0
		g, _, err := scenario.BuildGang(spec)
		if err != nil {
			w.t.Fatal(err)
		}
		d, _, err := placement.Place(ctx, w.cfg, snap, g)
		if err != nil {
			w.t.Fatal(err)
		}
		if d == nil {
			continue
		}
		if err := placement.Assume(ctx, snap, g, d); err != nil {
			w.t.Fatal(err)
		}
		out = append(out, &placedGang{Gang: g, Decision: d})
	}
	return out
}

// placedGang is a gang and its decision, assumed on a snapshot.
type placedGang struct {
	Gang     *placement.Gang
	Decision *placement.Decision
}

func digest(ctx context.Context, t *testing.T, s *index.Snapshot, keys []string) string {
	t.Helper()
	d, err := index.StateDigest(ctx, s, keys)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// placeAll places each probe on s (nothing assumed) and returns the
// decisions and refusals' messages.
func placeAll(ctx context.Context, t *testing.T, w *cacheWorld, s *index.Snapshot, probes []scenario.GangSpec) []any {
	t.Helper()
	var out []any
	for _, ps := range probes {
		g, _, err := scenario.BuildGang(ps)
		if err != nil {
			t.Fatal(err)
		}
		d, u, err := placement.Place(ctx, w.cfg, s, g)
		if err != nil {
			t.Fatal(err)
		}
		if u != nil {
			out = append(out, u.Message)
			continue
		}
		out = append(out, d)
	}
	return out
}
