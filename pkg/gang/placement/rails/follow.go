package rails

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
// of S (claims.go), so its NICs lie on its GPUs' rails; at most
// MaxFollowCalls tries per member and node. When none works, the node is
// refused for the member if the gang requires rail alignment (with
// CheckFollow, or CheckFollowBudget when the tries stopped), and
// the first result is kept otherwise. The same holds in the search's
// joint calls (each member of the node in turn, the others' devices
// fixed) and in the firstAvailable fills.

// CheckFollow counts nodes refused because no allocation there puts a
// member's NICs on its GPUs' rails and the gang requires rail alignment;
// CheckFollowBudget those where the tries stopped at MaxFollowCalls.
const (
	CheckFollow       = "NICs not on the GPUs' IB rails"
	CheckFollowBudget = "NICs not on the GPUs' IB rails within the tries"
)

// MaxFollowCalls bounds the Allocate calls that one member may make on one
// node to put its NICs on its GPUs' rails.
const MaxFollowCalls = 4

// Follower puts each member's NICs on its GPUs' rails (see the rules
// above) for one Place call, and keeps the nodes' lead devices and free
// devices by rail that the rail searches count with (search.go).
type Follower struct {
	*Members
	s      *index.Snapshot
	copies *Copies
	alloc  Allocator
	stats  Stats
	// required: the gang requires rail alignment; off: NICs do not follow
	// (the engine's old rule, kept for comparisons).
	required bool
	off      bool
	// lead: per node index, its devices of the main class; free: per node
	// index, its free devices by rail (no gang devices). Made on first
	// use.
	lead map[int]sets.Set[structured.DeviceID]
	free map[int]NodeRails
}

// NewFollower returns the follower of one Place call: required when the
// gang requires rail alignment, off when NICs do not follow (the old rule).
func NewFollower(m *Members, s *index.Snapshot, copies *Copies, alloc Allocator, stats Stats, required, off bool) *Follower {
	return &Follower{Members: m, s: s, copies: copies, alloc: alloc, stats: stats, required: required, off: off}
}

// follows reports whether member mi's claims ask for a class other than
// the main one.
func (fo *Follower) follows(mi int) bool {
	if fo.off || fo.Class == "" {
		return false
	}
	return slices.ContainsFunc(fo.Per[mi].AllClasses, func(c string) bool { return c != fo.Class })
}

// leadSet returns the node's devices of the main class; none for a gang
// without node-local devices (its main class is "").
func (fo *Follower) leadSet(ctx context.Context, ns *index.NodeState) (sets.Set[structured.DeviceID], error) {
	if fo.Class == "" {
		return nil, nil
	}
	if s, ok := fo.lead[ns.Index()]; ok {
		return s, nil
	}
	ids, err := fo.s.Matching(ctx, ns, fo.Class)
	if err != nil {
		return nil, err
	}
	s := sets.New(ids...)
	if fo.lead == nil {
		fo.lead = map[int]sets.Set[structured.DeviceID]{}
	}
	fo.lead[ns.Index()] = s
	return s, nil
}

// MemberRails returns the sorted distinct rails of a member's node-local
// devices in res: of its lead devices, and of all of them.
func (fo *Follower) MemberRails(ctx context.Context, ns *index.NodeState, res []resourceapi.AllocationResult) ([]int64, []int64, error) {
	lead, err := fo.leadSet(ctx, ns)
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
	return Distinct(leadRails), Distinct(all), nil
}

// freeRails counts the node's free devices of a class by rail: matching,
// not allocated, not in taken, on a rail of Within when it is set.
func (fo *Follower) freeRails(ctx context.Context, ns *index.NodeState, class string, taken sets.Set[structured.DeviceID]) (Counts, error) {
	ids, err := fo.s.Matching(ctx, ns, class)
	if err != nil {
		return Counts{}, err
	}
	rc := Counts{By: map[int64]int{}}
	for _, id := range ids {
		if ns.Allocated(id) || taken.Has(id) {
			continue
		}
		if r, ok := topology.DeviceIBRail(ns.Device(id)); ok {
			if fo.Within != nil && !slices.Contains(fo.Within, r) {
				continue // off the rails the members may use
			}
			rc.By[r]++
		} else {
			rc.None++
		}
	}
	return rc, nil
}

// nodeRailsOf counts a node's free devices by rail for the main class and
// the other node-local classes of the gang's members, minus taken.
func (fo *Follower) nodeRailsOf(ctx context.Context, ns *index.NodeState, taken sets.Set[structured.DeviceID]) (NodeRails, error) {
	lead, err := fo.freeRails(ctx, ns, fo.Class, taken)
	if err != nil {
		return NodeRails{}, err
	}
	nr := NodeRails{Lead: lead, Other: map[string]Counts{}}
	for _, sh := range fo.Distinct {
		for _, c := range sh.Classes {
			if _, done := nr.Other[c]; done || c == fo.Class {
				continue
			}
			if inCluster, err := fo.s.ClassInCluster(ctx, c); err != nil || inCluster {
				if err != nil {
					return NodeRails{}, err
				}
				continue // no count bound: the allocator decides
			}
			if nr.Other[c], err = fo.freeRails(ctx, ns, c, taken); err != nil {
				return NodeRails{}, err
			}
		}
	}
	return nr, nil
}

// FreeRailsOf is nodeRailsOf without gang devices, cached per Place.
func (fo *Follower) FreeRailsOf(ctx context.Context, ns *index.NodeState) (NodeRails, error) {
	if nr, ok := fo.free[ns.Index()]; ok {
		return nr, nil
	}
	nr, err := fo.nodeRailsOf(ctx, ns, nil)
	if err != nil {
		return NodeRails{}, err
	}
	if fo.free == nil {
		fo.free = map[int]NodeRails{}
	}
	fo.free[ns.Index()] = nr
	return nr, nil
}

// AllocMember allocates member mi's claims on a node next to inflight,
// renames split requests back, and puts its NICs on its GPUs' rails (see
// the rules above). It returns nil and the failed check when refused.
func (fo *Follower) AllocMember(ctx context.Context, ns *index.NodeState, mi int, claims []*resourceapi.ResourceClaim, inflight index.InFlight) ([]resourceapi.AllocationResult, string, error) {
	classes := fo.Per[mi].AllClasses
	res, why, err := fo.alloc.Allocate(ctx, ns, claims, classes, inflight)
	if res == nil || err != nil {
		return nil, why, err
	}
	res = fo.copies.Unsplit(claims, res)
	return fo.Follow(ctx, ns, mi, claims, res, func() index.InFlight { return inflight })
}

// Follow keeps res when member mi's NICs on node ns are on its GPUs'
// rails, or finds an allocation where they are (inflight: what the others
// hold); see the rules above.
func (fo *Follower) Follow(ctx context.Context, ns *index.NodeState, mi int, claims []*resourceapi.ResourceClaim, res []resourceapi.AllocationResult,
	inflight func() index.InFlight) ([]resourceapi.AllocationResult, string, error) {
	if !fo.follows(mi) {
		return res, "", nil
	}
	lead, all, err := fo.MemberRails(ctx, ns, res)
	if err != nil || len(lead) == 0 || len(all) == len(lead) {
		return res, "", err
	}
	alt, cut, err := fo.refollow(ctx, ns, mi, claims, lead, inflight())
	switch {
	case err != nil:
		return nil, "", err
	case alt != nil:
		return alt, "", nil
	case fo.required && cut:
		return nil, CheckFollowBudget, nil
	case fo.required:
		return nil, CheckFollow, nil
	}
	return res, "", nil
}

// refollow tries the node's candidate rail sets for member mi with its
// claims base (first: the rails of its first result's lead devices) and
// returns the first allocation whose following devices lie on its lead
// devices' rails, or nil and whether the tries stopped at MaxFollowCalls.
func (fo *Follower) refollow(ctx context.Context, ns *index.NodeState, mi int, base []*resourceapi.ResourceClaim, first []int64,
	inflight index.InFlight) ([]resourceapi.AllocationResult, bool, error) {
	nr, err := fo.nodeRailsOf(ctx, ns, inflight.OnNode(ns))
	if err != nil {
		return nil, false, err
	}
	cands := fo.followCandidates(nr, fo.Per[mi], first)
	for i, rails := range cands {
		if i == MaxFollowCalls {
			*fo.stats.Cutoffs++
			return nil, true, nil
		}
		claims := fo.copies.Limit(base, rails, true)
		*fo.stats.FollowCalls++
		res, _, err := fo.alloc.Allocate(ctx, ns, claims, fo.Per[mi].AllClasses, inflight)
		if err != nil || res == nil {
			if err != nil {
				return nil, false, err
			}
			continue
		}
		res = fo.copies.Unsplit(claims, res)
		lead, all, err := fo.MemberRails(ctx, ns, res)
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
// on a node with free devices nr (Fit), in try order: first, then
// wider sets, then more following devices to spare, then by rail numbers.
func (fo *Follower) followCandidates(nr NodeRails, sh *Shape, first []int64) [][]int64 {
	type cand struct {
		rails []int64
		key   string
		spare int
	}
	var cands []cand
	firstKey := Key(slices.Clone(first))
	g := sh.Need[fo.Class]
	EnumSets(WithFree(nr.Lead), LeastRails(g-nr.Lead.None, nr.Lead.Most()), g, MaxCandidates, func(rails []int64) {
		if fo.Fit(nr, sh, rails, 1) == 0 {
			return
		}
		spare := index.Unbounded
		for c, rc := range nr.Other {
			if n := sh.Need[c]; n > 0 {
				spare = min(spare, rc.Sum(rails)-n)
			}
		}
		cands = append(cands, cand{slices.Clone(rails), Key(slices.Clone(rails)), spare})
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
