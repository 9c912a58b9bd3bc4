package composite

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"k8s.io/dynamic-resource-allocation/structured"

	"github.com/gpufabric/gpufabric/pkg/gang/placement"
	"github.com/gpufabric/gpufabric/pkg/gang/placement/index"
	"github.com/gpufabric/gpufabric/pkg/topology"
)

// Coupled roles (docs/design/composite.md, "Coupled roles").
//
// Rules: a composite with Group.RailCoupling required or preferred
// couples the leaves below it whose nearest annotated ancestor it is
// (a group with none, a leaf included, leaves its subtree out) and whose
// pending members ask for devices (a main class, placement.Demand): each
// of them is placed rail-aligned (Gang.RailAlignmentRequired), and the
// first of them the search places fixes the coupling's rail set, the
// IB rails of its members' devices; the others are placed on that set
// only (Gang.Rails: a device on every rail of the set for a member that
// asks as many). The set lives on the search's stack with the leaf that
// fixed it, so backtracking that re-places that leaf (in another domain,
// or on the domain less a node) tries other sets, and a rollback forgets
// it. When the leaf that fixed the set fits but its siblings do not, it
// is placed again on other sets of as many rails first (tries: those
// with a free device on every rail on the most nodes of its parent's
// domain, at most maxRailTries, each allowing tryIn two more tries on
// the domain less a node). A leaf that fits nowhere on the set is
// refused with the set, the leaf that fixed it and the room the set has.
// A required coupling that cannot hold refuses the tree; a preferred one
// is dropped when the coupled search refuses the tree, which is then
// searched again uncoupled with the budget left, and the Decision says so
// (Coupled.Unmet). Leaves whose members all run fix nothing: the set is
// one decision's.

// couple is one coupling: the annotated composite and its mode.
type couple struct {
	owner *Group
	mode  string
}

// coupler keeps one search's couplings: which leaf is in which, the set
// a try of tryIn forces, the refusals on another leaf's set. It reads the
// search's stack, never changes it.
type coupler struct {
	s *index.Snapshot
	// of: each coupled leaf's coupling; class: its main class.
	of    map[*Group]*couple
	class map[*Group]string
	// force: the rail set a coupled leaf is placed on in this try of
	// tryIn (tries); missed: a coupled leaf's last refusal on another's
	// set, for the tree's refusal.
	force  map[*Group][]int64
	missed map[*Group]string
}

// newCoupler resolves each leaf's coupling (nearest annotated ancestor;
// loose: preferred couplings dropped). classOf is a leaf's main class (""
// when its pending members ask for no device: it is left out).
func newCoupler(s *index.Snapshot, root *Group, loose bool, classOf func(*Group) string) *coupler {
	cp := &coupler{s: s, of: map[*Group]*couple{}, class: map[*Group]string{}, force: map[*Group][]int64{}, missed: map[*Group]string{}}
	var walk func(g *Group, c *couple)
	walk = func(g *Group, c *couple) {
		switch g.RailCoupling {
		case topology.RailCouplingNone:
			c = nil
		case topology.RailCouplingRequired, topology.RailCouplingPreferred:
			c = &couple{owner: g, mode: g.RailCoupling}
			if loose && c.mode == topology.RailCouplingPreferred {
				c = nil
			}
		}
		if g.Leaf() {
			if class := classOf(g); c != nil && class != "" {
				cp.of[g], cp.class[g] = c, class
			}
			return
		}
		for _, k := range g.Children {
			walk(k, c)
		}
	}
	walk(root, nil)
	return cp
}

// preferredIn reports whether a tree has a preferred coupling.
func preferredIn(g *Group) bool {
	if g.RailCoupling == topology.RailCouplingPreferred {
		return true
	}
	return slices.ContainsFunc(g.Children, preferredIn)
}

// fixed returns the leaf that fixed c's rail set on the stack, and the
// set (nil, nil: none yet).
func (cp *coupler) fixed(c *couple, stack []placed) (*Group, []int64) {
	for _, p := range stack {
		if p.d != nil && cp.of[p.g] == c {
			return p.g, p.rails
		}
	}
	return nil, nil
}

// gang sets a coupled leaf's gang: rail-aligned, on the forced set or on
// the set another leaf fixed. It returns that leaf (nil: none).
func (cp *coupler) gang(g *Group, gang *placement.Gang, stack []placed) *Group {
	c := cp.of[g]
	if c == nil {
		return nil
	}
	gang.RailAlignmentRequired = true
	if f := cp.force[g]; f != nil {
		gang.Rails = f // a try of the leaf that fixes the set (tries)
		return nil
	}
	by, set := cp.fixed(c, stack)
	if by == nil || len(set) == 0 {
		return nil // the first: it fixes the set (or the devices have no rails)
	}
	gang.Rails = set
	return by
}

// placed returns a leaf's stack entry for decision d: with its rails when
// it is coupled.
func (cp *coupler) placed(g *Group, d *placement.Decision) placed {
	p := placed{g: g, d: d}
	if cp.of[g] != nil {
		p.rails = railsOf(cp.s, d)
	}
	return p
}

// maxRailTries bounds the other rail sets the leaf that fixed a
// coupling's set is placed on when its siblings do not fit.
const maxRailTries = 6

// maxRailSubsets bounds the rail sets tries counts.
const maxRailSubsets = 4096

// tries returns, when coupled leaf g fixed its coupling's set with its
// placement on the stack from index since, the other sets of as many
// rails to place it on when its siblings cannot follow (see the rules).
func (cp *coupler) tries(ctx context.Context, g *Group, scope *topology.Domain, stack []placed, since int) ([][]int64, error) {
	c := cp.of[g]
	if c == nil || cp.force[g] != nil {
		return nil, nil
	}
	var cur []int64
	for _, p := range stack[since:] {
		if p.g == g && p.d != nil {
			cur = p.rails
		}
	}
	if by, _ := cp.fixed(c, stack); by != g || len(cur) == 0 {
		return nil, nil
	}
	free, err := cp.freeByRail(ctx, scope, cp.class[g])
	if err != nil {
		return nil, err
	}
	universe := map[int64]bool{}
	for _, by := range free {
		for r := range by {
			universe[r] = true
		}
	}
	type cand struct {
		set   []int64
		nodes int
	}
	var cands []cand
	subsets(slices.Sorted(maps.Keys(universe)), len(cur), maxRailSubsets, func(set []int64) {
		n := 0
		for _, by := range free {
			if !slices.ContainsFunc(set, func(r int64) bool { return by[r] == 0 }) {
				n++
			}
		}
		if n > 0 && !slices.Equal(set, cur) {
			cands = append(cands, cand{slices.Clone(set), n})
		}
	})
	slices.SortStableFunc(cands, func(a, b cand) int { return b.nodes - a.nodes }) // subsets come in rail order
	var out [][]int64
	for _, c := range cands[:min(len(cands), maxRailTries)] {
		out = append(out, c.set)
	}
	return out, nil
}

// subsets calls f with each k-subset of rails (sorted), in order, at most
// limit of them; f must not keep its argument.
func subsets(rails []int64, k, limit int, f func([]int64)) {
	buf := make([]int64, 0, k)
	var rec func(from int)
	rec = func(from int) {
		if limit <= 0 {
			return
		}
		if len(buf) == k {
			limit--
			f(buf)
			return
		}
		for i := from; i <= len(rails)-(k-len(buf)); i++ {
			buf = append(buf, rails[i])
			rec(i + 1)
			buf = buf[:len(buf)-1]
		}
	}
	rec(0)
}

// why is a coupled leaf's refusal (u) in scope on the set that by fixed:
// how much room the set has there; the engine's first line too when the
// set has the devices by count. It is kept for the tree's refusal.
func (cp *coupler) why(ctx context.Context, g, by *Group, scope *topology.Domain, set []int64, u *placement.Unschedulable) (string, error) {
	c := cp.of[g]
	full, free, err := cp.setRoom(ctx, scope, cp.class[g], set)
	if err != nil {
		return "", err
	}
	named := strings.Join(full[:min(len(full), 4)], ", ")
	if len(full) > 4 {
		named += fmt.Sprintf(" and %d more", len(full)-4)
	}
	nodes := "no node has"
	switch len(full) {
	case 0:
	case 1:
		nodes = "1 node has"
	default:
		nodes = fmt.Sprintf("%d nodes have", len(full))
	}
	why := fmt.Sprintf("its %d pods (%d %s devices) are coupled (%s: %s on %s) to the IB rails %s of %s, and in %s %s a free device on every one of them",
		u.Pods, u.Devices, u.DeviceClass, topology.AnnotationRailCoupling, c.mode, c.owner.Name, railsKey(set), by.Name, where(scope), nodes)
	if named != "" {
		why += " (" + named + ")"
	}
	why += fmt.Sprintf(", %d are free on them in all", free)
	if free >= u.Devices {
		engine, _, _ := strings.Cut(u.Message, "\n")
		why += "; " + engine
	}
	cp.missed[g] = why
	return why, nil
}

// setRoom returns the nodes in scope (nil: the cluster) with a free
// device of class on every rail of set, and the free devices of class on
// the set there.
func (cp *coupler) setRoom(ctx context.Context, scope *topology.Domain, class string, set []int64) ([]string, int, error) {
	free, err := cp.freeByRail(ctx, scope, class)
	if err != nil {
		return nil, 0, err
	}
	var full []string
	total := 0
	for i, ns := range cp.nodesOf(scope) {
		on := 0
		for _, r := range set {
			total += free[i][r]
			if free[i][r] > 0 {
				on++
			}
		}
		if on == len(set) {
			full = append(full, ns.Name())
		}
	}
	return full, total, nil
}

// nodesOf is the snapshot's nodes in scope (nil: all).
func (cp *coupler) nodesOf(scope *topology.Domain) []*index.NodeState {
	if scope == nil {
		return cp.s.Nodes()
	}
	var out []*index.NodeState
	for _, n := range scope.Nodes {
		if ns := cp.s.Node(n); ns != nil {
			out = append(out, ns)
		}
	}
	return out
}

// freeByRail counts, per node of scope (nodesOf's order), the free
// devices of class by IB rail.
func (cp *coupler) freeByRail(ctx context.Context, scope *topology.Domain, class string) ([]map[int64]int, error) {
	nodes := cp.nodesOf(scope)
	out := make([]map[int64]int, len(nodes))
	for i, ns := range nodes {
		ids, err := cp.s.Matching(ctx, ns, class)
		if err != nil {
			return nil, err
		}
		out[i] = map[int64]int{}
		for _, id := range ids {
			if r, ok := topology.DeviceIBRail(ns.Device(id)); ok && !ns.Allocated(id) {
				out[i][r]++
			}
		}
	}
	return out, nil
}

// railsOf is the IB rails of the devices a leaf's decision gives its
// members (shared claims left out), sorted.
func railsOf(s *index.Snapshot, d *placement.Decision) []int64 {
	node := make(map[string]string, len(d.Pods))
	for _, p := range d.Pods {
		node[p.Name] = p.Node
	}
	var out []int64
	for _, c := range d.Claims {
		ns := s.Node(node[c.Pod])
		if c.Shared || ns == nil {
			continue
		}
		for _, r := range c.Allocation.Devices.Results {
			dev := ns.Device(structured.MakeDeviceID(r.Driver, r.Pool, r.Device))
			if dev == nil {
				continue
			}
			if rail, ok := topology.DeviceIBRail(dev); ok && !slices.Contains(out, rail) {
				out = append(out, rail)
			}
		}
	}
	slices.Sort(out)
	return out
}

// railsKey names a rail set: "{0,1,2,3}", "{}" for none.
func railsKey(set []int64) string {
	parts := make([]string, len(set))
	for i, r := range set {
		parts[i] = strconv.FormatInt(r, 10)
	}
	return "{" + strings.Join(parts, ",") + "}"
}

// Coupled is one coupling of a decision: the composite that asked for
// it, its mode, the rail set its leaves placed now use and those leaves
// (the first fixed the set), or why a preferred coupling did not hold.
type Coupled struct {
	Group string
	Mode  string
	// Rails is the set (empty: the devices have no IB rails); Leaves the
	// coupled leaves placed by this decision, the one that fixed the set
	// first.
	Rails  []int64
	Leaves []string
	// Unmet, for a preferred coupling placed uncoupled: why the coupled
	// search refused the tree.
	Unmet string
}

// decided lists a decision's couplings (stack: the search's), in the
// order their sets were fixed; then, with unmet (the coupled search's
// refusal), the preferred ones the tree was placed without.
func (cp *coupler) decided(root *Group, stack []placed, unmet string) []Coupled {
	var out []Coupled
	at := map[*couple]int{}
	for _, p := range stack {
		c := cp.of[p.g]
		if c == nil || p.d == nil {
			continue
		}
		i, ok := at[c]
		if !ok {
			i = len(out)
			at[c] = i
			out = append(out, Coupled{Group: c.owner.Name, Mode: c.mode, Rails: p.rails})
		}
		out[i].Leaves = append(out[i].Leaves, p.g.Name)
	}
	if unmet == "" {
		return out
	}
	var walk func(g *Group)
	walk = func(g *Group) {
		if g.RailCoupling == topology.RailCouplingPreferred {
			out = append(out, Coupled{Group: g.Name, Mode: g.RailCoupling, Unmet: cut(unmet)})
		}
		for _, k := range g.Children {
			walk(k)
		}
	}
	walk(root)
	return out
}

// summary says where a coupling's leaves are, for Decision.Summary.
func (c Coupled) summary() string {
	if c.Unmet != "" {
		return fmt.Sprintf("%s's roles not rail-coupled (%s: %s, it could not hold)", c.Group, topology.AnnotationRailCoupling, c.Mode)
	}
	return fmt.Sprintf("%s on IB rails %s", strings.Join(c.Leaves, " and "), railsKey(c.Rails))
}
