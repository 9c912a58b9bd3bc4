package placement

import (
	"context"
	"fmt"
	"sort"

	"github.com/gpufabric/gpufabric/pkg/gang/placement/index"
	"github.com/gpufabric/gpufabric/pkg/topology"
)

// Pack order is the order in which the fill, the firstAvailable search and
// the member search take a domain's nodes; members go in rank order, so it
// also decides which ranks share a node, a rack, an NVLink domain.
//
// Rules (least spread):
//   - only nodes where some member fits by the cheap checks;
//   - the nodes are grouped by the tree levels below the domain's, the
//     outermost first, down to the NVLink domain (sublevels). At each
//     level the groups the gang needs come first, chosen for the fewest
//     groups: the smallest group that holds the rest of the gang alone
//     (best fit); else the largest groups, the last of them the smallest
//     that completes the gang (Kueue TAS's BestFit). The other groups
//     follow, largest first, as fall-back for the allocator's refusals;
//   - inside an NVLink domain, nodes fullest first (ascending free devices
//     of the main class, then name): consecutive ranks share a node and
//     empty nodes stay whole.
//
// Capacity is counted in the main class's devices the members can use on a
// node by the cheap checks (pods when the gang asks for no devices).
//
// With Gang.Balanced, the groups chosen at the first sublevel get quotas of
// members as even as their capacity allows; the greedy fill keeps to them
// and falls back to the packed fill when it cannot (fillSpread). A partial
// placement (minCount below the members) is packed: it takes what fits.

// PackOrder says how the engine takes a domain's nodes for a gang.
type PackOrder string

const (
	// PackLeastSpread (the default) groups the nodes by the levels below
	// the domain and fills the fewest groups, fullest nodes first inside an
	// NVLink domain: gangs span the fewest racks and NVLink domains.
	PackLeastSpread PackOrder = "least-spread"
	// PackFullestNodes takes the domain's fullest nodes first, whatever
	// group they are in (the order before least spread): a gang fills the
	// holes other gangs left, over more NVLink domains. Balanced gangs are
	// packed as the others.
	PackFullestNodes PackOrder = "fullest-nodes"
)

// ParsePackOrder validates a pack order's name.
func ParsePackOrder(s string) (PackOrder, error) {
	switch o := PackOrder(s); o {
	case PackLeastSpread, PackFullestNodes:
		return o, nil
	}
	return "", fmt.Errorf("pack order %q is not one of %q, %q", s, PackLeastSpread, PackFullestNodes)
}

// packNode is a node where some member fits.
type packNode struct {
	ns   *index.NodeState
	free int // free devices of the main class
	cap  int // usable capacity, in the main class's devices (or pods)
	pods int // members of the best-fitting shape that fit
}

// packGroup is the nodes of one domain of a sublevel.
type packGroup struct {
	id    string
	nodes []packNode
	cap   int
	pods  int
}

// packer orders a domain's nodes for one Place call (see the rules
// above).
type packer struct {
	*members
	s   *index.Snapshot
	fit *fits
	// order is Config.PackOrder; balanced is Gang.Balanced.
	order    PackOrder
	balanced bool
}

// nodes returns the domain's nodes in pack order for placing need members,
// and a balanced gang's quota (nil for a packed one).
func (pk *packer) nodes(ctx context.Context, d *topology.Domain, need int) ([]*index.NodeState, *spreadQuota, error) {
	cands, err := pk.candidates(ctx, d)
	if err != nil {
		return nil, nil, err
	}
	demand := need * max(pk.perPod, 1)
	if need >= len(pk.per) && pk.class != "" {
		demand = pk.need
	}
	levels := sublevels(pk.s.Tree(), d)
	if pk.order == PackFullestNodes {
		levels = nil
	}
	out := make([]*index.NodeState, 0, len(cands))
	if len(levels) == 0 {
		return orderNodes(cands, nil, demand, out), nil, nil
	}
	groups := groupNodes(cands, levels[0])
	order, chosen := leastSpread(groups, demand)
	var balance *spreadQuota
	if pk.balanced && chosen > 1 && need >= len(pk.per) { // a partial placement takes what fits, packed
		balance = balancedQuota(groups, order[:chosen], need)
	}
	left := demand
	for _, gi := range order {
		out = orderNodes(groups[gi].nodes, levels[1:], max(min(left, groups[gi].cap), 0), out)
		left -= groups[gi].cap
	}
	return out, balance, nil
}

// candidates returns the domain's nodes where some member fits by the
// cheap checks, in the domain's (name) order, with their capacities.
func (pk *packer) candidates(ctx context.Context, d *topology.Domain) ([]packNode, error) {
	var out []packNode
	for _, n := range d.Nodes {
		ns := pk.s.Node(n)
		pn := packNode{ns: ns}
		for id, sh := range pk.distinct {
			c, _, err := pk.fit.fitOn(ctx, ns, id, nil)
			if err != nil {
				return nil, err
			}
			pn.pods = max(pn.pods, c)
			if units := c * sh.need[pk.class]; pk.class == "" {
				pn.cap = max(pn.cap, c)
			} else {
				pn.cap = max(pn.cap, units)
			}
		}
		if pn.pods == 0 {
			continue
		}
		if pk.class != "" {
			f, err := pk.s.FreeDevices(ctx, ns, pk.class)
			if err != nil {
				return nil, err
			}
			pn.free = f
		}
		out = append(out, pn)
	}
	return out, nil
}

// orderNodes appends nodes to out in pack order: grouped by levels
// (outermost first) with the groups for demand first, fullest node first
// inside the innermost groups.
func orderNodes(nodes []packNode, levels []*topology.Level, demand int, out []*index.NodeState) []*index.NodeState {
	if len(levels) == 0 {
		sort.SliceStable(nodes, func(i, j int) bool { return nodes[i].free < nodes[j].free })
		for _, n := range nodes {
			out = append(out, n.ns)
		}
		return out
	}
	groups := groupNodes(nodes, levels[0])
	order, _ := leastSpread(groups, demand)
	for _, gi := range order {
		out = orderNodes(groups[gi].nodes, levels[1:], max(min(demand, groups[gi].cap), 0), out)
		demand -= groups[gi].cap
	}
	return out
}

// groupNodes groups nodes (kept in their order) by their domain at level
// l; nodes in no domain of l form the group "".
func groupNodes(nodes []packNode, l *topology.Level) []packGroup {
	var groups []packGroup
	at := map[string]int{}
	for _, n := range nodes {
		id := ""
		if dom := l.DomainOf(n.ns.Name()); dom != nil {
			id = dom.ID
		}
		gi, ok := at[id]
		if !ok {
			gi = len(groups)
			at[id] = gi
			groups = append(groups, packGroup{id: id})
		}
		g := &groups[gi]
		g.nodes = append(g.nodes, n)
		g.cap += n.cap
		g.pods += n.pods
	}
	return groups
}

// leastSpread returns the groups' indexes in the order to fill them for
// demand, and how many of the first ones are chosen to hold it: the fewest
// groups that can (k, the count of the largest ones needed), and among the
// choices of k the fullest: each pick is the smallest group with which the
// k groups can still hold the demand (for the last pick, the smallest that
// completes it). The rest follow largest first. Ties go to the smaller id.
func leastSpread(groups []packGroup, demand int) ([]int, int) {
	avail := make([]int, len(groups)) // largest first
	for i := range avail {
		avail[i] = i
	}
	sort.SliceStable(avail, func(a, b int) bool {
		ga, gb := groups[avail[a]], groups[avail[b]]
		if ga.cap != gb.cap {
			return ga.cap > gb.cap
		}
		return ga.id < gb.id
	})
	k := 0
	for sum := 0; sum < demand && k < len(avail); k++ {
		sum += groups[avail[k]].cap
	}
	order := make([]int, 0, len(groups))
	for left := demand; len(order) < k; {
		pick := fullestFeasible(groups, avail, k-len(order)-1, left)
		order = append(order, avail[pick])
		left -= groups[avail[pick]].cap
		avail = append(avail[:pick], avail[pick+1:]...)
	}
	return append(order, avail...), k
}

// fullestFeasible returns the position in avail (largest first) of the
// smallest group that, with the after largest others, still holds left;
// the largest when none does. Among equal capacities the first (smaller
// id) wins.
func fullestFeasible(groups []packGroup, avail []int, after, left int) int {
	top := 0 // capacity of the after+1 largest
	for i := 0; i <= after && i < len(avail); i++ {
		top += groups[avail[i]].cap
	}
	pick := 0
	for i := len(avail) - 1; i >= 0; i-- {
		c := groups[avail[i]].cap
		others := top - groups[avail[min(after, len(avail)-1)]].cap // the after largest, i not among them
		if i <= after {
			others = top - c
		}
		if c+others >= left {
			pick = i
			break
		}
	}
	for pick > 0 && groups[avail[pick-1]].cap == groups[avail[pick]].cap {
		pick--
	}
	return pick
}

// sublevels returns the tree levels below a domain's, outermost first,
// down to the NVLink domain: for a domain of a label level that is not in
// the tree (Level -1), every level below the cluster.
func sublevels(t *topology.Tree, d *topology.Domain) []*topology.Level {
	n := d.Level
	if n < 0 || n >= len(t.Levels) {
		n = len(t.Levels) - 1
	}
	out := make([]*topology.Level, 0, n)
	for i := n - 1; i >= 0; i-- {
		out = append(out, t.Levels[i])
	}
	return out
}
