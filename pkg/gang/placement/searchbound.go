package placement

import (
	"context"
	"sort"

	"github.com/gpufabric/gpufabric/pkg/gang/placement/index"
)

// searchCounts bounds what the members left can take, by main-class
// devices (search.go).
//
// Rules: a member asking d devices of the main class goes to a node with
// at least d of them left, and the members on a node take at most what it
// has left. So the members left must need at most room (all devices left)
// in total, and, when every member left must be placed (none may be left
// out, and no shape is), for every demand k of a member left, the members
// asking k or more need at most what the nodes with at least k left have
// left (a histogram of the nodes' leftovers answers it).
// Free counts that bound nothing (a cluster-level pool of the class)
// disable both.
type searchCounts struct {
	bounded bool
	demand  []int // per member
	free    []int // per node position: main-class devices left
	room    int
	// hist counts the nodes by devices left; tails[mi] lists, for the
	// members from mi on, each distinct demand k (descending) with the sum
	// of the demands of at least k.
	hist  []int
	tails [][][2]int
}

func newSearchCounts(ctx context.Context, s *index.Snapshot, m *members, nodes []*index.NodeState) (searchCounts, error) {
	c := searchCounts{bounded: m.class != "", demand: make([]int, len(m.per)), free: make([]int, len(nodes))}
	for mi, sh := range m.per {
		c.demand[mi] = sh.need[m.class]
	}
	most := 0
	for pos, ns := range nodes {
		if !c.bounded {
			return c, nil
		}
		free, err := s.FreeDevices(ctx, ns, m.class)
		if err != nil {
			return c, err
		}
		c.free[pos], c.room, most = free, c.room+free, max(most, free)
		c.bounded = free < index.Unbounded
	}
	if !c.bounded {
		return c, nil
	}
	c.hist = make([]int, most+1)
	for _, f := range c.free {
		c.hist[f]++
	}
	c.tails = make([][][2]int, len(m.per)+1)
	for mi := len(m.per) - 1; mi >= 0; mi-- {
		c.tails[mi] = addTail(c.tails[mi+1], c.demand[mi])
	}
	return c, nil
}

// addTail returns tail with one more member asking d.
func addTail(tail [][2]int, d int) [][2]int {
	if d <= 0 {
		return tail
	}
	out := make([][2]int, 0, len(tail)+1)
	above, done := 0, false
	for _, e := range tail {
		if e[0] > d {
			out, above = append(out, e), e[1]
			continue
		}
		if !done && e[0] < d {
			out = append(out, [2]int{d, above + d})
		}
		done = true
		out = append(out, [2]int{e[0], e[1] + d})
	}
	if !done {
		out = append(out, [2]int{d, above + d})
	}
	return out
}

// take records n more devices taken on the node at pos (negative: given
// back).
func (c *searchCounts) take(pos, n int) {
	c.room -= n
	if c.hist == nil || n == 0 {
		return
	}
	c.hist[c.free[pos]]--
	c.free[pos] -= n
	c.hist[c.free[pos]]++
}

// bound reports whether the devices left can still hold the members from
// mi on that must be placed (the smallest ones, when some may be left
// out: skips more may be; left marks the shapes, ids being the members'
// shapes, whose members are left out).
func (c *searchCounts) bound(mi int, ids []int, left []bool, skips int) bool {
	forced := 0
	var demand []int
	for q := mi; q < len(c.demand); q++ {
		if left[ids[q]] {
			forced++
			continue
		}
		demand = append(demand, c.demand[q])
	}
	spare := skips - forced
	switch {
	case spare < 0:
		return false
	case !c.bounded:
		return true
	case spare == 0 && forced == 0:
		return c.fits(mi)
	}
	sort.Ints(demand)
	total := 0
	for _, n := range demand[:max(0, len(demand)-spare)] {
		total += n
	}
	return total <= c.room
}

// fits checks the members from mi on against the histogram (all placed).
func (c *searchCounts) fits(mi int) bool {
	tail := c.tails[mi]
	if len(tail) == 0 {
		return true
	}
	if tail[len(tail)-1][1] > c.room {
		return false
	}
	have, v := 0, len(c.hist)-1
	for _, e := range tail {
		for ; v >= e[0]; v-- {
			have += v * c.hist[v]
		}
		if e[1] > have {
			return false
		}
	}
	return true
}
