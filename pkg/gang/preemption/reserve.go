package preemption

import (
	"context"
	"fmt"
	"sort"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/gpufabric/gpufabric/pkg/gang/placement"
	"github.com/gpufabric/gpufabric/pkg/gang/placement/index"
	"github.com/gpufabric/gpufabric/pkg/topology"
)

// Starvation: a gang that has waited longer than a bound reserves the
// domain closest to fitting it. Gangs of its priority or lower then use
// that domain only if they cannot delay it (EASY backfilling): their
// declared run time (pod activeDeadlineSeconds) ends before the domain's
// shadow time, the earliest time by which the workloads running there are
// bound to have freed enough devices for the reserved gang.

// Reservation is the domain a starving gang holds.
type Reservation struct {
	TopologyKey string
	Domain      string
	// Nodes of the domain, sorted.
	Nodes []string
	// Free devices of the domain when it was chosen; Need what the gang
	// asks for.
	Free, Need int
}

// ClosestDomain returns the domain of the gang's level (its required key,
// or without one the smallest level where any domain could hold it) in
// which the gang would fit were the domain empty, with the most free
// devices now; nil when no domain could ever hold it. Of each level the
// maxDomains domains with the most free devices are tried.
func ClosestDomain(ctx context.Context, cfg placement.Config, in index.SnapshotInput, g *placement.Gang, maxDomains int) (*Reservation, error) {
	return closestDomain(ctx, cfg, in, g.TopologyKey, GangDevices(g), gangPlacer{g}, maxDomains)
}

// ClosestTreeDomain is ClosestDomain for a CompositePodGroup tree: the
// domains of its root's level (t.TopologyKey), the tree placed by its own
// Placer, asking for t.Devices. A tree with running members
// (t.BoundNodes) reserves nothing: it is pinned to them.
func ClosestTreeDomain(ctx context.Context, cfg placement.Config, in index.SnapshotInput, t *Tree, maxDomains int) (*Reservation, error) {
	if len(t.BoundNodes) > 0 {
		return nil, nil
	}
	return closestDomain(ctx, cfg, in, t.TopologyKey, t.Devices, t.Placer, maxDomains)
}

// closestDomain is ClosestDomain for a preemptor that p places, at the
// level of key, asking for need devices.
func closestDomain(ctx context.Context, cfg placement.Config, in index.SnapshotInput, key string, need int, p Placer, maxDomains int) (*Reservation, error) {
	if maxDomains <= 0 {
		maxDomains = DefaultMaxDomains
	}
	tree, err := topology.BuildTree(cfg.Index.Tree, in.Nodes, in.ResourceSlices)
	if err != nil {
		return nil, fmt.Errorf("build fabric tree: %w", err)
	}
	free := FreeDevices(in)
	for _, l := range candidateLevels(tree, key, in) {
		type cand struct {
			d    *topology.Domain
			free int
		}
		cands := make([]cand, 0, len(l.Domains))
		for _, d := range l.Domains {
			c := cand{d: d}
			for _, n := range d.Nodes {
				c.free += free[n]
			}
			cands = append(cands, c)
		}
		sort.SliceStable(cands, func(i, j int) bool { return cands[i].free > cands[j].free })
		for i, c := range cands {
			if i == maxDomains {
				break
			}
			empty := restrict(in, sets.New(c.d.Nodes...))
			empty.Pods, empty.ResourceClaims = nil, nil
			snap, err := index.NewSnapshot(ctx, cfg.Index, empty)
			if err != nil {
				return nil, fmt.Errorf("reservation snapshot: %w", err)
			}
			if d, _, err := p.Place(ctx, cfg, snap); err != nil {
				return nil, err
			} else if d != nil {
				return &Reservation{TopologyKey: l.Key, Domain: c.d.ID, Nodes: c.d.Nodes, Free: c.free, Need: need}, nil
			}
		}
	}
	return nil, nil
}

// GangDevices counts the node-local devices a gang asks for: every exact
// request of its members' own claims (the first alternative of a
// prioritized list; "All" requests count one). Shared claims are left out:
// they take devices of cluster-level pools (fabric-domain channels), which
// FreeDevices does not count either.
func GangDevices(g *placement.Gang) int {
	n := 0
	for _, m := range g.Members {
		for _, c := range m.Claims {
			n += claimDevices(c)
		}
	}
	return n
}

func claimDevices(c *resourceapi.ResourceClaim) int {
	n := 0
	for _, r := range c.Spec.Devices.Requests {
		switch {
		case r.Exactly != nil && r.Exactly.AllocationMode == resourceapi.DeviceAllocationModeAll:
			n++
		case r.Exactly != nil:
			n += int(max(r.Exactly.Count, 1))
		case len(r.FirstAvailable) > 0:
			n += int(max(r.FirstAvailable[0].Count, 1))
		}
	}
	return n
}

// Release is capacity a domain gets back by a known time: the devices of
// a running workload whose run time is bounded.
type Release struct {
	At      time.Time
	Devices int
}

// Shadow is the earliest time by which a domain with free devices now has
// need free, counting only bounded releases; ok is false when they never
// add up (a workload there runs without a bound).
func Shadow(now time.Time, need, free int, releases []Release) (t time.Time, ok bool) {
	if free >= need {
		return now, true
	}
	sorted := append([]Release(nil), releases...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].At.Before(sorted[j].At) })
	for _, r := range sorted {
		free += r.Devices
		if free >= need {
			return r.At, true
		}
	}
	return time.Time{}, false
}

// MayBackfill reports whether a gang that runs at most runFor may use a
// reserved domain's free devices now without delaying the reservation.
func MayBackfill(now time.Time, runFor time.Duration, shadow time.Time, ok bool) bool {
	return ok && runFor > 0 && !now.Add(runFor).After(shadow)
}
