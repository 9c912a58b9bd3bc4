package placement

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/gpufabric/gpufabric/pkg/gang/placement/index"
)

// Counting free devices by IB rail, for the rail searches (rails.go,
// railfollow.go).

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

// signature names free devices by rail and cheap fits.
func (nr nodeRails) signature(cheap []int) string {
	var b strings.Builder
	write := func(rc railCounts) {
		rails := make([]int64, 0, len(rc.by))
		for r := range rc.by {
			rails = append(rails, r)
		}
		slices.Sort(rails)
		for _, r := range rails {
			fmt.Fprintf(&b, "%d:%d,", r, rc.by[r])
		}
		fmt.Fprintf(&b, "-:%d|", rc.none)
	}
	write(nr.lead)
	classes := make([]string, 0, len(nr.other))
	for c := range nr.other {
		classes = append(classes, c)
	}
	sort.Strings(classes)
	for _, c := range classes {
		b.WriteString(c + "=")
		write(nr.other[c])
	}
	for _, c := range cheap {
		b.WriteString(strconv.Itoa(c) + ",")
	}
	return b.String()
}

// memberFit is how many members of a shape fit on a node with free
// devices nr when each uses exactly the rails (a lead device on every
// one), at most cheap: no more than the fewest free lead devices on one
// of the rails, the free lead devices over its lead demand, and the free
// following devices of each class over its demand. A shape without lead
// demand fits cheap times.
func (m *members) memberFit(nr nodeRails, sh *shape, rails []int64, cheap int) int {
	g := sh.need[m.class]
	if g == 0 || cheap == 0 {
		return cheap
	}
	if len(rails) > g {
		return 0
	}
	fit := min(cheap, nr.lead.least(rails), nr.lead.sum(rails)/g)
	for c, rc := range nr.other {
		if n := sh.need[c]; n > 0 {
			fit = min(fit, rc.sum(rails)/n)
		}
	}
	return fit
}

// distinct sorts v and drops repeats.
func distinct(v []int64) []int64 {
	slices.Sort(v)
	return slices.Compact(v)
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
