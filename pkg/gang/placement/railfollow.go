package placement

import (
	"context"
	"slices"
	"sort"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/structured"

	"github.com/gpufabric/gpufabric/pkg/gang/placement/index"
	"github.com/gpufabric/gpufabric/pkg/topology"
)

// NICs follow their GPUs (issue 13, "rails done fully").
//
// Rules: a member's lead devices are those of the gang's main class (the
// class it asks most devices of, ties by name: the GPUs, unless the gang
// asks for more NICs than GPUs); its other devices with an ibRail
// attribute (the NICs, of any other class) follow: they must be on rails
// of its lead devices on that node. A member whose claims ask for no other
// class pays nothing. After the allocator placed a member's claims on a
// node, the engine checks the result (no call); when a following device
// is off the lead devices' rails, it tries rail sets S of that node: S
// holds only rails where a lead device is free, at most as many rails as
// the member asks lead devices and at least as many as those need at the
// most free lead devices on one rail, and enough free lead and following
// devices (devices without a rail count for every S); first the rails of
// the first result's lead devices, then the widest sets, then those with
// the most following devices to spare, then by rail numbers. Each try
// allocates the member's claims limited to S with a device on every rail
// of S (railclaims.go), so its NICs lie on its GPUs' rails; at most
// maxFollowCalls tries per member and node. When none works, the node is
// refused for the member if the gang requires rail alignment (with
// CheckRailFollow, or CheckRailFollowBudget when the tries stopped), and
// the first result is kept otherwise. The same holds in the search's
// joint calls (each member of the node in turn, the others' devices
// fixed) and in the firstAvailable fills.

// CheckRailFollow counts nodes refused because no allocation there puts a
// member's NICs on its GPUs' rails and the gang requires rail alignment;
// CheckRailFollowBudget those where the tries stopped at maxFollowCalls.
const (
	CheckRailFollow       = "NICs not on the GPUs' IB rails"
	CheckRailFollowBudget = "NICs not on the GPUs' IB rails within the tries"
)

// maxFollowCalls bounds the Allocate calls that one member may make on one
// node to put its NICs on its GPUs' rails.
const maxFollowCalls = 4

// railState is one Place call's rail bookkeeping, made on first use.
type railState struct {
	// lead: per node index, its devices of the main class.
	lead map[int]sets.Set[structured.DeviceID]
	// free: per node index, its free devices by rail (no gang devices).
	free map[int]nodeRails
	// copies: rail-limited claims (railClaims); splits: for a copy with a
	// split request, each piece's original request.
	copies map[string][]*resourceapi.ResourceClaim
	splits map[*resourceapi.ResourceClaim]map[string]string
	// why: per domain id, why no rail set placed the gang there.
	why map[string]string
}

func (p *placer) railState() *railState {
	if p.rails == nil {
		p.rails = &railState{lead: map[int]sets.Set[structured.DeviceID]{}, free: map[int]nodeRails{},
			copies: map[string][]*resourceapi.ResourceClaim{}, splits: map[*resourceapi.ResourceClaim]map[string]string{}, why: map[string]string{}}
	}
	return p.rails
}

// railCounts are free devices by IB rail, and those without a rail.
type railCounts struct {
	by   map[int64]int
	none int
}

// sum is the free devices on the rails or on none.
func (rc railCounts) sum(rails []int64) int {
	n := rc.none
	for _, r := range rails {
		n += rc.by[r]
	}
	return n
}

// least is the fewest free devices on one of the rails.
func (rc railCounts) least(rails []int64) int {
	m := index.Unbounded
	for _, r := range rails {
		m = min(m, rc.by[r])
	}
	return m
}

// nodeRails are a node's free devices by rail: of the main class, and of
// each other node-local class the gang's members ask for.
type nodeRails struct {
	lead  railCounts
	other map[string]railCounts
}

// follows reports whether member mi's claims ask for a class other than
// the main one.
func (p *placer) follows(mi int) bool {
	if p.cfg.oldRails || p.class == "" {
		return false
	}
	return slices.ContainsFunc(p.per[mi].allClasses, func(c string) bool { return c != p.class })
}

// leadSet returns the node's devices of the main class.
func (p *placer) leadSet(ctx context.Context, ns *index.NodeState) (sets.Set[structured.DeviceID], error) {
	rs := p.railState()
	if s, ok := rs.lead[ns.Index()]; ok {
		return s, nil
	}
	ids, err := p.s.Matching(ctx, ns, p.class)
	if err != nil {
		return nil, err
	}
	s := sets.New(ids...)
	rs.lead[ns.Index()] = s
	return s, nil
}

// memberRails returns the sorted distinct rails of a member's node-local
// devices in res: of its lead devices, and of all of them.
func (p *placer) memberRails(ctx context.Context, ns *index.NodeState, res []resourceapi.AllocationResult) ([]int64, []int64, error) {
	lead, err := p.leadSet(ctx, ns)
	if err != nil {
		return nil, nil, err
	}
	var leadRails, all []int64
	for _, r := range res {
		for _, d := range r.Devices.Results {
			id := structured.MakeDeviceID(d.Driver, d.Pool, d.Device)
			dev := ns.Device(id)
			if dev == nil {
				continue
			}
			rail, ok := topology.DeviceIBRail(dev)
			if !ok {
				continue
			}
			all = append(all, rail)
			if lead.Has(id) {
				leadRails = append(leadRails, rail)
			}
		}
	}
	return distinct(leadRails), distinct(all), nil
}

func distinct(v []int64) []int64 {
	slices.Sort(v)
	return slices.Compact(v)
}

// freeRails counts the node's free devices of a class by rail: matching,
// not allocated, not in taken.
func (p *placer) freeRails(ctx context.Context, ns *index.NodeState, class string, taken sets.Set[structured.DeviceID]) (railCounts, error) {
	ids, err := p.s.Matching(ctx, ns, class)
	if err != nil {
		return railCounts{}, err
	}
	rc := railCounts{by: map[int64]int{}}
	for _, id := range ids {
		if ns.Allocated(id) || taken.Has(id) {
			continue
		}
		if r, ok := topology.DeviceIBRail(ns.Device(id)); ok {
			rc.by[r]++
		} else {
			rc.none++
		}
	}
	return rc, nil
}

// nodeRailsOf counts a node's free devices by rail for the main class and
// the other node-local classes of the gang's members, minus taken.
func (p *placer) nodeRailsOf(ctx context.Context, ns *index.NodeState, taken sets.Set[structured.DeviceID]) (nodeRails, error) {
	lead, err := p.freeRails(ctx, ns, p.class, taken)
	if err != nil {
		return nodeRails{}, err
	}
	nr := nodeRails{lead: lead, other: map[string]railCounts{}}
	for _, sh := range p.distinct {
		for _, c := range sh.classes {
			if _, done := nr.other[c]; done || c == p.class {
				continue
			}
			if inCluster, err := p.s.ClassInCluster(ctx, c); err != nil || inCluster {
				if err != nil {
					return nodeRails{}, err
				}
				continue // no count bound: the allocator decides
			}
			if nr.other[c], err = p.freeRails(ctx, ns, c, taken); err != nil {
				return nodeRails{}, err
			}
		}
	}
	return nr, nil
}

// memberFit is how many members of a shape fit on a node with free
// devices nr when each uses exactly the rails (a lead device on every
// one), at most cheap: no more than the fewest free lead devices on one
// of the rails, the free lead devices over its lead demand, and the free
// following devices of each class over its demand. A shape without lead
// demand fits cheap times.
func (p *placer) memberFit(nr nodeRails, sh *shape, rails []int64, cheap int) int {
	g := sh.need[p.class]
	if g == 0 || cheap == 0 {
		return cheap
	}
	if len(rails) > g {
		return 0
	}
	m := min(cheap, nr.lead.least(rails), nr.lead.sum(rails)/g)
	for c, rc := range nr.other {
		if n := sh.need[c]; n > 0 {
			m = min(m, rc.sum(rails)/n)
		}
	}
	return m
}

// allocMember allocates member mi's claims on a node next to inflight,
// renames split requests back, and puts its NICs on its GPUs' rails (see
// the rules above). It returns nil and the failed check when refused.
func (p *placer) allocMember(ctx context.Context, ns *index.NodeState, mi int, claims []*resourceapi.ResourceClaim, inflight index.InFlight) ([]resourceapi.AllocationResult, string, error) {
	classes := p.per[mi].allClasses
	res, why, err := p.allocate(ctx, ns, claims, classes, inflight)
	if res == nil || err != nil {
		return nil, why, err
	}
	res = p.unsplit(claims, res)
	return p.follow(ctx, ns, mi, claims, res, func() index.InFlight { return inflight })
}

// follow keeps res when member mi's NICs on node ns are on its GPUs'
// rails, or finds an allocation where they are (inflight: what the others
// hold); see the rules above.
func (p *placer) follow(ctx context.Context, ns *index.NodeState, mi int, claims []*resourceapi.ResourceClaim, res []resourceapi.AllocationResult,
	inflight func() index.InFlight) ([]resourceapi.AllocationResult, string, error) {
	if !p.follows(mi) {
		return res, "", nil
	}
	lead, all, err := p.memberRails(ctx, ns, res)
	if err != nil || len(lead) == 0 || len(all) == len(lead) {
		return res, "", err
	}
	alt, cut, err := p.refollow(ctx, ns, mi, claims, lead, inflight())
	switch {
	case err != nil:
		return nil, "", err
	case alt != nil:
		return alt, "", nil
	case p.g.RailAlignmentRequired && cut:
		return nil, CheckRailFollowBudget, nil
	case p.g.RailAlignmentRequired:
		return nil, CheckRailFollow, nil
	}
	return res, "", nil
}

// refollow tries the node's candidate rail sets for member mi with its
// claims base (first: the rails of its first result's lead devices) and
// returns the first allocation whose following devices lie on its lead
// devices' rails, or nil and whether the tries stopped at maxFollowCalls.
func (p *placer) refollow(ctx context.Context, ns *index.NodeState, mi int, base []*resourceapi.ResourceClaim, first []int64,
	inflight index.InFlight) ([]resourceapi.AllocationResult, bool, error) {
	nr, err := p.nodeRailsOf(ctx, ns, inflight.OnNode(ns))
	if err != nil {
		return nil, false, err
	}
	cands := p.followCandidates(nr, p.per[mi], first)
	for i, rails := range cands {
		if i == maxFollowCalls {
			p.stats.RailCutoffs++
			return nil, true, nil
		}
		claims := p.railClaims(base, rails, true)
		p.stats.RailFollowCalls++
		res, _, err := p.allocate(ctx, ns, claims, p.per[mi].allClasses, inflight)
		if err != nil || res == nil {
			if err != nil {
				return nil, false, err
			}
			continue
		}
		res = p.unsplit(claims, res)
		lead, all, err := p.memberRails(ctx, ns, res)
		if err != nil {
			return nil, false, err
		}
		if len(all) == len(lead) {
			return res, false, nil
		}
	}
	return nil, false, nil
}

// followCandidates lists the rail sets where one member of the shape fits
// on a node with free devices nr (memberFit), in try order: first, then
// wider sets, then more following devices to spare, then by rail numbers.
func (p *placer) followCandidates(nr nodeRails, sh *shape, first []int64) [][]int64 {
	type cand struct {
		rails []int64
		key   string
		spare int
	}
	var cands []cand
	firstKey := railKey(slices.Clone(first))
	g := sh.need[p.class]
	enumRailSets(railsWithFree(nr.lead), leastRails(g-nr.lead.none, nr.lead.most()), g, maxRailCandidates, func(rails []int64) {
		if p.memberFit(nr, sh, rails, 1) == 0 {
			return
		}
		spare := index.Unbounded
		for c, rc := range nr.other {
			if n := sh.need[c]; n > 0 {
				spare = min(spare, rc.sum(rails)-n)
			}
		}
		cands = append(cands, cand{slices.Clone(rails), railKey(slices.Clone(rails)), spare})
	})
	sort.SliceStable(cands, func(i, j int) bool {
		a, b := cands[i], cands[j]
		if (a.key == firstKey) != (b.key == firstKey) {
			return a.key == firstKey
		}
		if len(a.rails) != len(b.rails) {
			return len(a.rails) > len(b.rails)
		}
		if a.spare != b.spare {
			return a.spare > b.spare
		}
		return a.key < b.key
	})
	out := make([][]int64, len(cands))
	for i, c := range cands {
		out[i] = c.rails
	}
	return out
}

// railsWithFree returns the sorted rails with a free device.
func railsWithFree(rc railCounts) []int64 {
	var out []int64
	for r, n := range rc.by {
		if n > 0 {
			out = append(out, r)
		}
	}
	slices.Sort(out)
	return out
}

// enumRailSets calls f with every subset of rails (sorted) of least to
// most rails, larger sets first, each size in lexicographic order, at most
// limit of them; it reports whether it stopped at the limit. f must not
// keep its argument.
func enumRailSets(rails []int64, least, most, limit int, f func([]int64)) bool {
	count := 0
	buf := make([]int64, 0, len(rails))
	var rec func(from, k int) bool
	rec = func(from, k int) bool {
		if len(buf) == k {
			if count++; count > limit {
				return true
			}
			f(buf)
			return false
		}
		for i := from; i <= len(rails)-(k-len(buf)); i++ {
			buf = append(buf, rails[i])
			stop := rec(i+1, k)
			buf = buf[:len(buf)-1]
			if stop {
				return true
			}
		}
		return false
	}
	for k := min(most, len(rails)); k >= max(least, 1); k-- {
		if rec(0, k) {
			return true
		}
	}
	return false
}

// leastRails is the fewest rails a member asking g lead devices can use
// when no rail has more than perRail of them free.
func leastRails(g, perRail int) int {
	if perRail <= 0 {
		return g
	}
	return (g + perRail - 1) / perRail
}

// most is the most free devices on one rail.
func (rc railCounts) most() int {
	m := 0
	for _, n := range rc.by {
		m = max(m, n)
	}
	return m
}
