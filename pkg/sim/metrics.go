package sim

import (
	"math"
	"slices"
	"time"

	"github.com/gpufabric/gpufabric/pkg/sim/trees"
)

// Result is what one policy achieved on one trace. Everything but
// Latencies and SyncTime (wall clock) is deterministic.
type Result struct {
	// Key is the level a keyed baseline ran with ("" for the others).
	Key       string
	Policy    string
	Gangs     int
	TotalGPUs int
	Horizon   int64
	// Placed gangs (all pods placed) by the horizon.
	Placed int
	// InDomain: placed gangs whose pods all share one NVLink domain.
	InDomain int
	// FitDomain: placed gangs no larger than the largest NVLink domain;
	// FitDomainInDomain of them landed in one.
	FitDomain, FitDomainInDomain int
	// Room: placed gangs for which, just before the decision, one NVLink
	// domain had room for the whole gang; RoomInDomain of them landed in
	// one.
	Room, RoomInDomain int
	// Refusals counts attempts that left a gang (partly) unplaced while the
	// cluster's free GPUs were at least what it still needed.
	Refusals     int
	FirstRefusal *Refusal
	// Teardowns of partial gangs (pod-by-pod policies).
	Teardowns int
	// RankPairs counts pods r and r+1 of placed gangs (rank = pod index);
	// RankSameNode and RankSameRack those on one node, in one rack.
	RankPairs, RankSameNode, RankSameRack int
	// RacksUsed sums the racks of every placed gang. Big counts the placed
	// gangs larger than the largest NVLink domain, BigDomains the NVLink
	// domains they span, BigMinDomains the fewest each could span
	// (⌈GPUs / largest domain⌉).
	RacksUsed                      int
	Big, BigDomains, BigMinDomains int
	// BusyPct is the time average of GPUs in running gangs, in % of the
	// cluster, over [0, Horizon].
	BusyPct float64
	// Waits in seconds: arrival to start for placed gangs, arrival to the
	// horizon for gangs still waiting.
	Waits []int64
	// SizeWaits are the Waits by gang size (GPUs); SizePlaced counts the
	// placed gangs by size.
	SizeWaits  map[int][]int64
	SizePlaced map[int]int
	Series     []Sample

	// Latencies of the policy's Place calls (wall time).
	Latencies []time.Duration
	// Syncs counts the policy's rebuilds (Syncer), SyncTime their wall time.
	Syncs    int
	SyncTime time.Duration
	// Goodput of a failure run (Options.Failures), nil otherwise.
	Goodput *Goodput
	// Trees: the tree jobs' numbers, nil when the trace has none;
	// TreesHow says how the policy expressed them; TreeLatencies are the
	// Place calls of tree jobs (wall time, in Latencies too).
	Trees         *trees.Stats
	TreesHow      string
	TreeLatencies []time.Duration
}

// Refusal is the first refusal of a gang that fit in the free GPUs.
type Refusal struct {
	Time     int64
	Gang     int
	NeedGPUs int
	FreeGPUs int
	// AllocatedPct is the cluster's allocated GPUs (including pods of
	// partial gangs) in % at that moment.
	AllocatedPct float64
}

// Sample is the cluster's occupancy after the events of one instant: GPUs
// of running gangs and GPUs held by pods of partial gangs.
type Sample struct {
	T    int64
	Busy int
	Held int
}

func (r *Result) refusal(now int64, gang, need, free int) {
	if need > free {
		return
	}
	r.Refusals++
	if r.FirstRefusal == nil {
		r.FirstRefusal = &Refusal{Time: now, Gang: gang, NeedGPUs: need, FreeGPUs: free,
			AllocatedPct: 100 * float64(r.TotalGPUs-free) / float64(r.TotalGPUs)}
	}
}

func (r *Result) placed(g TraceGang, wait int64, oneDomain, room, fits bool) {
	r.Placed++
	r.Waits = append(r.Waits, wait)
	r.sizeWait(g.GPUs(), wait, true)
	if oneDomain {
		r.InDomain++
	}
	if fits {
		r.FitDomain++
		if oneDomain {
			r.FitDomainInDomain++
		}
	}
	if room {
		r.Room++
		if oneDomain {
			r.RoomInDomain++
		}
	}
}

// ranks counts a placed gang's adjacent-rank pairs: nodes[i] is pod i's
// node, rackOf a node's rack.
func (r *Result) ranks(nodes []int, rackOf func(int) int) {
	for i := 1; i < len(nodes); i++ {
		r.RankPairs++
		if nodes[i] == nodes[i-1] {
			r.RankSameNode++
		}
		if a, b := rackOf(nodes[i]), rackOf(nodes[i-1]); a == b && a >= 0 {
			r.RankSameRack++
		}
	}
}

// spread counts the racks a placed gang spans and, for a gang larger than
// an NVLink domain of maxDomain GPUs, the domains it spans against the
// fewest possible.
func (r *Result) spread(g TraceGang, nodes []int, rackOf, domainOf func(int) int, maxDomain int) {
	racks, domains := map[int]bool{}, map[int]bool{}
	for _, n := range nodes {
		racks[rackOf(n)] = true
		domains[domainOf(n)] = true
	}
	r.RacksUsed += len(racks)
	if g.GPUs() > maxDomain && maxDomain > 0 {
		r.Big++
		r.BigDomains += len(domains)
		r.BigMinDomains += (g.GPUs() + maxDomain - 1) / maxDomain
	}
}

func (r *Result) sample(t int64, busy, held int) {
	if n := len(r.Series); n > 0 && r.Series[n-1].Busy == busy && r.Series[n-1].Held == held {
		return
	}
	r.Series = append(r.Series, Sample{T: t, Busy: busy, Held: held})
}

// Summary is a Result in the units of the report.
type Summary struct {
	Policy string
	Gangs  int
	Placed int
	// InDomainPct: of all placed gangs; FitInDomainPct: of placed gangs no
	// larger than an NVLink domain; RoomInDomainPct: of placed gangs for
	// which a domain had room (100 when there were none).
	InDomainPct, FitInDomainPct, RoomInDomainPct float64
	// RankSameNodePct, RankSameRackPct: of adjacent-rank pairs.
	RankSameNodePct, RankSameRackPct float64
	// RacksPerGang is the mean racks of a placed gang; BigDomains and
	// BigMinDomains the mean NVLink domains of the placed gangs larger
	// than one, and the fewest they could span (0 without such gangs).
	RacksPerGang, BigDomains, BigMinDomains float64
	// AllocAtRefusalPct is the allocation at the first refusal; 100 with
	// NoRefusal when nothing fitting was ever refused.
	AllocAtRefusalPct float64
	NoRefusal         bool
	Refusals          int
	Teardowns         int
	BusyPct           float64
	WaitMeanMin       float64
	WaitP99Min        float64
	// Wall clock, not deterministic.
	LatP50ms, LatP99ms float64
	Decisions          int
	SyncSeconds        float64
}

// Summary computes the report's numbers.
func (r *Result) Summary() Summary {
	s := Summary{
		Policy: r.Policy, Gangs: r.Gangs, Placed: r.Placed, Refusals: r.Refusals, Teardowns: r.Teardowns,
		InDomainPct: pct(r.InDomain, r.Placed), FitInDomainPct: pct(r.FitDomainInDomain, r.FitDomain),
		RoomInDomainPct: pct(r.RoomInDomain, r.Room), BusyPct: round(r.BusyPct, 1),
		RankSameNodePct: pct(r.RankSameNode, r.RankPairs), RankSameRackPct: pct(r.RankSameRack, r.RankPairs),
		RacksPerGang: mean(r.RacksUsed, r.Placed), BigDomains: mean(r.BigDomains, r.Big), BigMinDomains: mean(r.BigMinDomains, r.Big),
		AllocAtRefusalPct: 100, NoRefusal: r.FirstRefusal == nil,
		Decisions: len(r.Latencies), SyncSeconds: round(r.SyncTime.Seconds(), 2),
	}
	if r.FirstRefusal != nil {
		s.AllocAtRefusalPct = round(r.FirstRefusal.AllocatedPct, 1)
	}
	if len(r.Waits) > 0 {
		var sum int64
		for _, w := range r.Waits {
			sum += w
		}
		s.WaitMeanMin = round(float64(sum)/float64(len(r.Waits))/60, 1)
		s.WaitP99Min = round(float64(percentile(r.Waits, 0.99))/60, 1)
	}
	if len(r.Latencies) > 0 {
		s.LatP50ms = round(float64(percentile(r.Latencies, 0.5))/1e6, 3)
		s.LatP99ms = round(float64(percentile(r.Latencies, 0.99))/1e6, 3)
	}
	return s
}

// percentile is the nearest-rank p-quantile (0 < p ≤ 1).
func percentile[T int64 | time.Duration](v []T, p float64) T {
	s := slices.Clone(v)
	slices.Sort(s)
	i := int(math.Ceil(p*float64(len(s)))) - 1
	return s[min(max(i, 0), len(s)-1)]
}

// mean is a / b with two decimals, 0 when b is 0.
func mean(a, b int) float64 {
	if b == 0 {
		return 0
	}
	return round(float64(a)/float64(b), 2)
}

func pct(a, b int) float64 {
	if b == 0 {
		return 100
	}
	return round(100*float64(a)/float64(b), 1)
}

func round(v float64, digits int) float64 {
	m := math.Pow(10, float64(digits))
	return math.Round(v*m) / m
}
