package placement

import (
	"fmt"
	"sort"
	"strings"

	"github.com/gpufabric/gpufabric/pkg/gang/placement/index"
	"github.com/gpufabric/gpufabric/pkg/topology"
)

// spreadQuota is a balanced gang's limit of members per domain of the first
// sublevel (packorder.go): nodes of domains that were not chosen are absent
// and take none.
type spreadQuota struct {
	group map[*index.NodeState]int
	limit []int
}

// balancedQuota splits need members over the chosen groups as evenly as
// their capacity in pods allows: groups in ascending capacity (then id)
// take min(capacity, ⌈members left / groups left⌉).
func balancedQuota(groups []packGroup, chosen []int, need int) *spreadQuota {
	q := &spreadQuota{group: map[*index.NodeState]int{}, limit: make([]int, len(chosen))}
	byCap := make([]int, len(chosen))
	for i := range byCap {
		byCap[i] = i
	}
	sort.SliceStable(byCap, func(a, b int) bool {
		ga, gb := groups[chosen[byCap[a]]], groups[chosen[byCap[b]]]
		if ga.pods != gb.pods {
			return ga.pods < gb.pods
		}
		return ga.id < gb.id
	})
	left := need
	for k, i := range byCap {
		g := groups[chosen[i]]
		groupsLeft := len(byCap) - k
		q.limit[i] = min(g.pods, (left+groupsLeft-1)/groupsLeft)
		left -= q.limit[i]
		for _, n := range g.nodes {
			q.group[n.ns] = i
		}
	}
	return q
}

// quotaLeft is what one fill may still place per group.
type quotaLeft struct {
	q    *spreadQuota
	left []int
}

// start returns fresh counts for one fill; nil (no limit) for a nil quota.
func (q *spreadQuota) start() *quotaLeft {
	if q == nil {
		return nil
	}
	return &quotaLeft{q: q, left: append([]int(nil), q.limit...)}
}

// allows reports whether a member may go to the node. Safe on nil.
func (ql *quotaLeft) allows(ns *index.NodeState) bool {
	if ql == nil {
		return true
	}
	g, ok := ql.q.group[ns]
	return ok && ql.left[g] > 0
}

// take counts a member placed on the node. Safe on nil.
func (ql *quotaLeft) take(ns *index.NodeState) {
	if ql != nil {
		ql.left[ql.q.group[ns]]--
	}
}

// LevelSpread is how a decision's members are split over the domains of
// one level below the domain it chose.
type LevelSpread struct {
	TopologyKey string
	// Domains in descending member count, then id.
	Domains []DomainPods
}

// DomainPods is how many members went to one domain.
type DomainPods struct {
	ID   string
	Pods int
}

// spreadOf returns, for every level of the tree below the attempt's domain
// (outermost first), the members per domain.
func spreadOf(t *topology.Tree, att *attempt) []LevelSpread {
	levels := sublevels(t, att.dom)
	out := make([]LevelSpread, 0, len(levels))
	for _, l := range levels {
		count := map[string]int{}
		for _, ns := range att.memberNode {
			id := ""
			if d := l.DomainOf(ns.Name()); d != nil {
				id = d.ID
			}
			count[id]++
		}
		ls := LevelSpread{TopologyKey: l.Key}
		for id, n := range count {
			ls.Domains = append(ls.Domains, DomainPods{ID: id, Pods: n})
		}
		sort.Slice(ls.Domains, func(i, j int) bool {
			if ls.Domains[i].Pods != ls.Domains[j].Pods {
				return ls.Domains[i].Pods > ls.Domains[j].Pods
			}
			return ls.Domains[i].ID < ls.Domains[j].ID
		})
		out = append(out, ls)
	}
	return out
}

// maxSpreadListed is how many domains per level SpreadSummary names.
const maxSpreadListed = 4

// SpreadSummary renders the levels below Domain that the members span, for
// events and conditions: "over 2 gpufabric.dev/nvlinkDomain domains (d: 8
// pods, b: 4)"; levels are joined with "; ", at most four domains are named
// per level. It is "" when every level holds the gang in one domain.
func (d *Decision) SpreadSummary() string {
	var parts []string
	for _, ls := range d.Spread {
		if len(ls.Domains) < 2 {
			continue
		}
		var b strings.Builder
		fmt.Fprintf(&b, "over %d %s domains (", len(ls.Domains), ls.TopologyKey)
		for i, dp := range ls.Domains[:min(len(ls.Domains), maxSpreadListed)] {
			if i > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "%s: %d", dp.ID, dp.Pods)
			if i == 0 {
				b.WriteString(" pods")
			}
		}
		if more := len(ls.Domains) - maxSpreadListed; more > 0 {
			fmt.Fprintf(&b, ", %d more", more)
		}
		b.WriteString(")")
		parts = append(parts, b.String())
	}
	return strings.Join(parts, "; ")
}
