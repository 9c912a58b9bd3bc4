package placement

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/dynamic-resource-allocation/structured"

	"github.com/gpufabric/gpufabric/pkg/topology"
)

// CheckRailAlignment counts domains rejected because rail alignment was
// required and no aligned placement was found.
const CheckRailAlignment = "rail alignment impossible (domains)"

// usage is what the gang's earlier members take on one node.
type usage struct {
	res  resList
	pods int64
	dev  map[string]int
}

// attempt is a (partial) placement of the gang in one domain.
type attempt struct {
	dom      *topology.Domain
	inflight map[poolID][]structured.DeviceID
	used     map[*nodeState]*usage
	shared   []resourceapi.AllocationResult
	// members[i] is the gang index of the i-th placed member; memberNode,
	// memberRes and memberClm are parallel to it.
	members    []int
	memberNode []*nodeState
	memberRes  [][]resourceapi.AllocationResult
	memberClm  [][]*resourceapi.ResourceClaim
	score      Score
}

func (att *attempt) addDevices(results []resourceapi.AllocationResult) {
	for _, r := range results {
		for _, d := range r.Devices.Results {
			if d.AdminAccess != nil && *d.AdminAccess {
				continue
			}
			pid := poolID{d.Driver, d.Pool}
			att.inflight[pid] = append(att.inflight[pid], structured.MakeDeviceID(d.Driver, d.Pool, d.Device))
		}
	}
}

func (p *placer) refuse(check string, node string) {
	if p.refused[check] == nil {
		p.refused[check] = map[string]bool{}
	}
	p.refused[check][node] = true
}

// verify places at least need members (all of them when need is the gang's
// size) in the domain, or returns nil. Shared claims are allocated first on
// an anchor node; the members then go only to nodes matching the
// allocations' node selectors. Anchors whose node matches the selectors of
// an anchor that already failed are skipped.
func (p *placer) verify(ctx context.Context, d *topology.Domain, need int) (*attempt, error) {
	p.budget = newSearchBudget(len(p.per), p.searchLeft)
	nodes, err := p.packOrder(ctx, d, need)
	if err != nil || len(p.sharedClaims) == 0 {
		if err != nil {
			return nil, err
		}
		return p.fillSpread(ctx, d, nodes, nil, need)
	}
	var failed [][]*nodeaffinity.NodeSelector
	refusedViews := map[string]bool{}
	anchors := 0
	for _, ns := range nodes {
		view, err := p.sharedView(ctx, ns)
		if err != nil {
			return nil, err
		}
		if refusedViews[view] || matchesAny(failed, ns) {
			continue
		}
		if anchors++; anchors > p.s.cfg.MaxSharedAnchors {
			break
		}
		res, why, err := p.s.allocate(ctx, ns, p.sharedClaims, p.sharedClasses, nil, &p.stats)
		if err != nil {
			return nil, err
		}
		if res == nil {
			p.refuse(why+" for shared claims (domains)", d.ID)
			refusedViews[view] = true
			continue
		}
		sels, err := selectorsOf(res)
		if err != nil {
			return nil, err
		}
		var sub []*nodeState
		for _, n := range nodes {
			if matchesAll(sels, n) {
				sub = append(sub, n)
			}
		}
		att, err := p.fillSpread(ctx, d, sub, res, need)
		if att != nil || err != nil {
			return att, err
		}
		failed = append(failed, sels)
	}
	return nil, nil
}

// sharedView names the cluster-level slices of the shared claims' classes
// that a node sees. Nodes with the same view get the same answer for the
// shared claims, so after a refusal the engine skips them.
func (p *placer) sharedView(ctx context.Context, ns *nodeState) (string, error) {
	cluster, err := p.s.clusterSlicesFor(ctx, ns, p.sharedClasses)
	if err != nil {
		return "", err
	}
	names := make([]string, 0, len(cluster)+1)
	names = append(names, ns.node.Name) // node-local slices differ per node
	for _, cs := range cluster {
		names = append(names, cs.slice.Name)
	}
	if len(cluster) > 0 {
		names = names[1:] // the shared classes live in cluster-level pools
	}
	return strings.Join(names, "\x00"), nil
}

func selectorsOf(results []resourceapi.AllocationResult) ([]*nodeaffinity.NodeSelector, error) {
	var out []*nodeaffinity.NodeSelector
	for _, r := range results {
		if r.NodeSelector == nil {
			continue
		}
		sel, err := nodeaffinity.NewNodeSelector(r.NodeSelector)
		if err != nil {
			return nil, fmt.Errorf("allocation node selector: %w", err)
		}
		out = append(out, sel)
	}
	return out, nil
}

func matchesAll(sels []*nodeaffinity.NodeSelector, ns *nodeState) bool {
	for _, s := range sels {
		if !s.Match(ns.node) {
			return false
		}
	}
	return true
}

func matchesAny(sets [][]*nodeaffinity.NodeSelector, ns *nodeState) bool {
	for _, sels := range sets {
		if matchesAll(sels, ns) {
			return true
		}
	}
	return false
}

// fillAligned fills the members and scores rail alignment. When alignment
// is required and the first fill is not aligned, it refills with every
// member's main-class requests restricted to one rail set at a time (the
// most used sets of the first fill, at most four).
func (p *placer) fillAligned(ctx context.Context, d *topology.Domain, nodes []*nodeState, shared []resourceapi.AllocationResult, need int) (*attempt, error) {
	own := func(mi int) []*resourceapi.ResourceClaim { return p.per[mi].claims }
	att, err := p.fill(ctx, d, nodes, shared, own, nil, need)
	if err != nil {
		return nil, err
	}
	if att == nil {
		return p.fillHarder(ctx, d, nodes, shared, need)
	}
	return p.alignRails(d, att, func(_ string, claimsOf func(int) []*resourceapi.ResourceClaim) (*attempt, error) {
		return p.fill(ctx, d, nodes, shared, claimsOf, nil, need)
	})
}

// alignRails scores att's rail alignment. When alignment is required and
// att is not aligned, it calls refill with every member's main-class
// requests restricted to one rail set at a time (the most used sets of
// att, at most four; rails names the set) and returns the first aligned
// result; a domain where none is aligned is rejected.
func (p *placer) alignRails(d *topology.Domain, att *attempt, refill func(rails string, claimsOf func(int) []*resourceapi.ResourceClaim) (*attempt, error)) (*attempt, error) {
	att.score.RailSets = len(p.railSets(att))
	if !p.g.RailAlignmentRequired || att.score.RailSets <= 1 {
		return att, nil
	}
	for _, rails := range railCandidates(p.railSets(att), 4) {
		restricted := p.restrictRails(rails)
		alt, err := refill(rails, func(mi int) []*resourceapi.ResourceClaim { return restricted[mi] })
		if err != nil {
			return nil, err
		}
		if alt != nil {
			if alt.score.RailSets = len(p.railSets(alt)); alt.score.RailSets <= 1 {
				return alt, nil
			}
		}
	}
	p.refuse(CheckRailAlignment, d.ID)
	return nil, nil
}

// fillHarder runs when the greedy fill failed: greedy first choices can
// dead-end where later alternatives fit (firstalt.go; rail refills are not
// tried on such a placement), and greedy member placement where another
// assignment fits (search.go).
func (p *placer) fillHarder(ctx context.Context, d *topology.Domain, nodes []*nodeState, shared []resourceapi.AllocationResult, need int) (*attempt, error) {
	if p.quota != nil {
		return nil, nil // a balanced fill that fails falls back to packed (fillSpread)
	}
	att, err := p.fillAlternatives(ctx, d, nodes, shared, need)
	if err != nil {
		return nil, err
	}
	if att != nil {
		att.score.RailSets = len(p.railSets(att))
		return att, nil
	}
	if !p.searchable {
		return nil, nil
	}
	return p.searchAligned(ctx, d, nodes, shared, need)
}

// fill places the members in order. Each member goes to the first node (in
// the given order, from where the previous member of its shape went) that
// passes the cheap checks and where the allocator finds its claims'
// devices next to the gang's in-flight ones. Nodes a shape failed on are
// not tried again for that shape: the gang only ever takes more. Members
// whose claims differ (variant, nil: none do) keep separate cursors. When
// need is less than the gang's size, a member that fits nowhere is left
// out; the attempt succeeds with at least need members.
func (p *placer) fill(ctx context.Context, d *topology.Domain, nodes []*nodeState, shared []resourceapi.AllocationResult,
	claimsOf func(int) []*resourceapi.ResourceClaim, variant []int, need int) (*attempt, error) {
	att := &attempt{dom: d, inflight: map[poolID][]structured.DeviceID{}, used: map[*nodeState]*usage{}, shared: shared}
	att.addDevices(shared)
	quota := p.quota.start()
	cursors := map[[2]int]int{}
	for mi, sh := range p.per {
		id := p.ids[mi]
		key := [2]int{id, 0}
		if variant != nil {
			key[1] = variant[mi]
		}
		cursor := cursors[key]
		placed := false
		for ; cursor < len(nodes) && !placed; cursor++ {
			ns := nodes[cursor]
			if !quota.allows(ns) {
				continue
			}
			c, _, err := p.fitOn(ctx, ns, id, att.used[ns])
			if err != nil {
				return nil, err
			}
			if c == 0 {
				continue
			}
			if p.antiFailExisting(mi, ns) || p.antiFailPlaced(att, mi, ns) {
				p.refuse(CheckPodAntiAffinity, ns.node.Name)
				continue
			}
			claims := claimsOf(mi)
			var res []resourceapi.AllocationResult
			if len(claims) > 0 {
				var why string
				res, why, err = p.s.allocate(ctx, ns, claims, sh.allClasses, att.inflight, &p.stats)
				if err != nil {
					return nil, err
				}
				if res == nil {
					p.refuse(why, ns.node.Name)
					continue
				}
			}
			att.place(mi, ns, sh, claims, res)
			quota.take(ns)
			placed = true
			cursor-- // stay on this node for the next member of the shape
		}
		cursors[key] = cursor
		if !placed && need >= len(p.per) {
			return nil, nil
		}
	}
	if len(att.members) < need {
		return nil, nil
	}
	return att, nil
}

func (att *attempt) place(mi int, ns *nodeState, sh *shape, claims []*resourceapi.ResourceClaim, res []resourceapi.AllocationResult) {
	u := att.used[ns]
	if u == nil {
		u = &usage{res: resList{}, dev: map[string]int{}}
		att.used[ns] = u
	}
	u.res.add(sh.req, 1)
	u.pods++
	for c, n := range sh.need {
		u.dev[c] += n
	}
	att.addDevices(res)
	att.members = append(att.members, mi)
	att.memberNode = append(att.memberNode, ns)
	att.memberRes = append(att.memberRes, res)
	att.memberClm = append(att.memberClm, claims)
}

// railSets returns, per distinct set of IB rails used by a member's
// node-local devices, how many members use it. Members without rails do
// not count.
func (p *placer) railSets(att *attempt) map[string]int {
	out := map[string]int{}
	for i, ns := range att.memberNode {
		devs := p.s.devicesOf(ns)
		var rails []int64
		for _, r := range att.memberRes[i] {
			for _, d := range r.Devices.Results {
				dev := devs.byID[structured.MakeDeviceID(d.Driver, d.Pool, d.Device)]
				if dev == nil {
					continue
				}
				if rail, ok := topology.DeviceIBRail(dev); ok {
					rails = append(rails, rail)
				}
			}
		}
		if len(rails) > 0 {
			out[railKey(rails)]++
		}
	}
	return out
}

func railKey(rails []int64) string {
	sort.Slice(rails, func(i, j int) bool { return rails[i] < rails[j] })
	parts := make([]string, 0, len(rails))
	for i, r := range rails {
		if i > 0 && rails[i-1] == r {
			continue
		}
		parts = append(parts, strconv.FormatInt(r, 10))
	}
	return strings.Join(parts, ",")
}

// railCandidates returns the most used rail sets first (ties by key).
func railCandidates(sets map[string]int, limit int) []string {
	keys := make([]string, 0, len(sets))
	for k := range sets {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if sets[keys[i]] != sets[keys[j]] {
			return sets[keys[i]] > sets[keys[j]]
		}
		return keys[i] < keys[j]
	})
	return keys[:min(limit, len(keys))]
}

// restrictRails returns each member's claims with a selector added to every
// request of the main class: devices on one of the rails (or without one).
func (p *placer) restrictRails(rails string) [][]*resourceapi.ResourceClaim {
	expr := fmt.Sprintf(`!(%q in device.attributes[%q]) || device.attributes[%q].%s in [%s]`,
		topology.AttrIBRail, topology.DriverName, topology.DriverName, topology.AttrIBRail, rails)
	out := make([][]*resourceapi.ResourceClaim, len(p.per))
	for mi, sh := range p.per {
		for _, c := range sh.claims {
			c = c.DeepCopy()
			for i := range c.Spec.Devices.Requests {
				if e := c.Spec.Devices.Requests[i].Exactly; e != nil && e.DeviceClassName == p.class {
					e.Selectors = append(e.Selectors, resourceapi.DeviceSelector{CEL: &resourceapi.CELDeviceSelector{Expression: expr}})
				}
			}
			out[mi] = append(out[mi], c)
		}
	}
	return out
}
