package rails

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/gpufabric/gpufabric/pkg/gang/placement/index"
)

// Counting free devices by IB rail, for the rail searches (search.go,
// follow.go).

// Counts are free devices by IB rail, and those without a rail.
type Counts struct {
	By   map[int64]int
	None int
}

// Sum is the free devices on the rails or on none.
func (rc Counts) Sum(rails []int64) int {
	n := rc.None
	for _, r := range rails {
		n += rc.By[r]
	}
	return n
}

// Least is the fewest free devices on one of the rails.
func (rc Counts) Least(rails []int64) int {
	m := index.Unbounded
	for _, r := range rails {
		m = min(m, rc.By[r])
	}
	return m
}

// NodeRails are a node's free devices by rail: of the main class, and of
// each other node-local class the gang's members ask for.
type NodeRails struct {
	Lead  Counts
	Other map[string]Counts
}

// Signature names free devices by rail and cheap fits.
func (nr NodeRails) Signature(cheap []int) string {
	var b strings.Builder
	write := func(rc Counts) {
		rails := make([]int64, 0, len(rc.By))
		for r := range rc.By {
			rails = append(rails, r)
		}
		slices.Sort(rails)
		for _, r := range rails {
			fmt.Fprintf(&b, "%d:%d,", r, rc.By[r])
		}
		fmt.Fprintf(&b, "-:%d|", rc.None)
	}
	write(nr.Lead)
	classes := make([]string, 0, len(nr.Other))
	for c := range nr.Other {
		classes = append(classes, c)
	}
	sort.Strings(classes)
	for _, c := range classes {
		b.WriteString(c + "=")
		write(nr.Other[c])
	}
	for _, c := range cheap {
		b.WriteString(strconv.Itoa(c) + ",")
	}
	return b.String()
}

// Fit is how many members of a shape fit on a node with free
// devices nr when each uses exactly the rails (a lead device on every
// one), at most cheap: no more than the fewest free lead devices on one
// of the rails, the free lead devices over its lead demand, and the free
// following devices of each class over its demand. A shape without lead
// demand fits cheap times.
func (m *Members) Fit(nr NodeRails, sh *Shape, rails []int64, cheap int) int {
	g := sh.Need[m.Class]
	if g == 0 || cheap == 0 {
		return cheap
	}
	if len(rails) > g {
		return 0
	}
	fit := min(cheap, nr.Lead.Least(rails), nr.Lead.Sum(rails)/g)
	for c, rc := range nr.Other {
		if n := sh.Need[c]; n > 0 {
			fit = min(fit, rc.Sum(rails)/n)
		}
	}
	return fit
}

// Distinct sorts v and drops repeats.
func Distinct(v []int64) []int64 {
	slices.Sort(v)
	return slices.Compact(v)
}

// WithFree returns the sorted rails with a free device.
func WithFree(rc Counts) []int64 {
	var out []int64
	for r, n := range rc.By {
		if n > 0 {
			out = append(out, r)
		}
	}
	slices.Sort(out)
	return out
}

// EnumSets calls f with every subset of rails (sorted) of least to
// most rails, larger sets first, each size in lexicographic order, at most
// limit of them; it reports whether it stopped at the limit. f must not
// keep its argument.
func EnumSets(rails []int64, least, most, limit int, f func([]int64)) bool {
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

// LeastRails is the fewest rails a member asking g lead devices can use
// when no rail has more than perRail of them free.
func LeastRails(g, perRail int) int {
	if perRail <= 0 {
		return g
	}
	return (g + perRail - 1) / perRail
}

// Most is the most free devices on one rail.
func (rc Counts) Most() int {
	m := 0
	for _, n := range rc.By {
		m = max(m, n)
	}
	return m
}
