package composite

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/gpufabric/gpufabric/pkg/gang/placement"
	"github.com/gpufabric/gpufabric/pkg/topology"
)

// demand is the least a placement of a group takes of one device class
// (the first its leaves ask for): a leaf's placement.Demand; a
// composite's MinGroupCount smallest children's.
type demand struct {
	class string
	least int
}

func (sr *searcher) demandOf(g *Group) (demand, error) {
	if d, ok := sr.demands[g]; ok {
		return d, nil
	}
	var d demand
	if g.Leaf() {
		if len(g.Gang.Members) > 0 {
			class, _, least, err := placement.Demand(g.Gang)
			if err != nil {
				return demand{}, fmt.Errorf("%s: %w", g.Name, err)
			}
			d = demand{class: class, least: least}
		}
	} else {
		var leasts []int
		for _, c := range g.Children {
			cd, err := sr.demandOf(c)
			if err != nil {
				return demand{}, err
			}
			if d.class == "" {
				d.class = cd.class
			}
			if cd.class == d.class {
				leasts = append(leasts, cd.least)
			} else {
				leasts = append(leasts, 0)
			}
		}
		slices.Sort(leasts)
		for _, n := range leasts[:min(g.MinGroupCount, len(leasts))] {
			d.least += n
		}
	}
	sr.demands[g] = d
	return d, nil
}

// classOf is a leaf's main class, "" when its pending members ask for no
// device (or the engine will report its error).
func (sr *searcher) classOf(g *Group) string {
	if d, err := sr.demandOf(g); err == nil && d.least > 0 {
		return d.class
	}
	return ""
}

// scopes returns the domains to try g in, inside scope (nil: the whole
// cluster), best fit first (the search tries at most
// Options.Alternatives of them); none
// and why when there is none. A group without a topology key is tried in
// its parent's scope. A subtree with running members is pinned to the
// domain of its level that holds them.
func (sr *searcher) scopes(ctx context.Context, g *Group, scope *topology.Domain) ([]*topology.Domain, string, error) {
	if g.TopologyKey == "" {
		return []*topology.Domain{scope}, "", nil
	}
	l := sr.s.Level(g.TopologyKey)
	if scope != nil && l.Index >= 0 && scope.Level >= 0 && scope.Key != l.Key && l.Index > scope.Level {
		return nil, fmt.Sprintf("its topology key %s is a wider level than its parent's %s", g.TopologyKey, scope.Key), nil
	}
	if running := g.runningNodes(); len(running) > 0 {
		return sr.pinned(g, l, running, scope)
	}
	var doms []*topology.Domain
	for _, d := range l.Domains {
		if sr.touches(d, scope) {
			doms = append(doms, d)
		}
	}
	if len(doms) == 0 {
		return nil, fmt.Sprintf("no domain of %s lies in %s", g.TopologyKey, where(scope)), nil
	}
	dm, err := sr.demandOf(g)
	if err != nil || dm.class == "" {
		return doms, "", err
	}
	li, err := sr.s.LevelIndex(ctx, l, dm.class)
	if err != nil {
		return nil, "", err
	}
	free := func(d *topology.Domain) int {
		if e := li.Of(d.Nodes[0]); e != nil {
			return e.Free()
		}
		return 0
	}
	most := slices.MaxFunc(doms, func(a, b *topology.Domain) int { return free(a) - free(b) })
	doms = slices.DeleteFunc(doms, func(d *topology.Domain) bool { return len(d.Nodes) == 0 || free(d) < dm.least })
	if len(doms) == 0 {
		return nil, fmt.Sprintf("it needs at least %d free devices of class %s in one domain of %s; the most free in %s: %d (%s)",
			dm.least, dm.class, g.TopologyKey, where(scope), free(most), most.ID), nil
	}
	sort.SliceStable(doms, func(i, j int) bool {
		if fi, fj := free(doms[i]), free(doms[j]); fi != fj {
			return fi < fj
		}
		return doms[i].ID < doms[j].ID
	})
	return doms, "", nil
}

// pinned is the domain of level l that holds every running node, inside
// scope.
func (sr *searcher) pinned(g *Group, l *topology.Level, running []string, scope *topology.Domain) ([]*topology.Domain, string, error) {
	var doms []*topology.Domain
	for _, n := range running {
		if d := l.DomainOf(n); d != nil && !slices.Contains(doms, d) {
			doms = append(doms, d)
		}
	}
	switch {
	case len(doms) == 0:
		return nil, fmt.Sprintf("its members run on nodes without a domain of %s", g.TopologyKey), nil
	case len(doms) > 1:
		return nil, fmt.Sprintf("its members already run in %d domains of %s", len(doms), g.TopologyKey), nil
	case !sr.touches(doms[0], scope):
		return nil, fmt.Sprintf("its members run in %s %s, outside %s", g.TopologyKey, doms[0].ID, where(scope)), nil
	}
	return doms, "", nil
}

// touches reports whether domain d shares a node with scope (nil: every
// domain does). The scopes' node sets are kept for the Place call.
func (sr *searcher) touches(d, scope *topology.Domain) bool {
	if scope == nil {
		return true
	}
	if scope.Key == d.Key && len(scope.Nodes) == len(d.Nodes) {
		return scope.ID == d.ID
	}
	in := sr.nodeSets[scope] // scopes live for the Place call
	if in == nil {
		in = make(map[string]bool, len(scope.Nodes))
		for _, n := range scope.Nodes {
			in[n] = true
		}
		sr.nodeSets[scope] = in
	}
	return slices.ContainsFunc(d.Nodes, func(n string) bool { return in[n] })
}

// where names a scope in messages.
func where(scope *topology.Domain) string {
	if scope == nil {
		return "the cluster"
	}
	return scope.Key + " " + scope.ID
}

// mayHold is a necessary condition for placing target of kids inside
// scope, from free-device counts alone: the target children that need the
// least must fit in the scope's free devices in all, and those of each
// topology key must find, between them, a domain of that key each (a
// domain with f free devices holds at most f / (the least any of them
// needs) of them). Free counts are upper bounds, so a true answer says
// nothing; a false one saves a search that cannot succeed.
func (sr *searcher) mayHold(ctx context.Context, kids []*Group, target int, scope *topology.Domain) bool {
	type need struct {
		g *Group
		d demand
	}
	var needs []need
	for _, k := range kids {
		if d, err := sr.demandOf(k); err == nil {
			needs = append(needs, need{k, d})
		}
	}
	slices.SortStableFunc(needs, func(a, b need) int { return a.d.least - b.d.least })
	needs = needs[:min(target, len(needs))]
	perKey := map[string][]need{}
	total, class := 0, ""
	for _, n := range needs {
		if n.d.least == 0 || class != "" && n.d.class != class {
			continue // runs already, or another class: not counted
		}
		class = n.d.class
		total += n.d.least
		if n.g.TopologyKey != "" {
			perKey[n.g.TopologyKey] = append(perKey[n.g.TopologyKey], n)
		}
	}
	if class == "" {
		return true
	}
	if free, ok := sr.freeIn(ctx, scope, class); ok && free < total {
		return false
	}
	for key, ns := range perKey {
		least := ns[0].d.least // sorted: the smallest of them
		l := sr.s.Level(key)
		li, err := sr.s.LevelIndex(ctx, l, class)
		if err != nil {
			return true
		}
		room := 0
		for _, d := range l.Domains {
			if e := li.Of(firstNode(d)); e != nil && sr.touches(d, scope) {
				room += e.Free() / least
			}
		}
		if room < len(ns) {
			return false
		}
	}
	return true
}

// freeIn is the free devices of class in scope (the whole cluster when
// nil), when known.
func (sr *searcher) freeIn(ctx context.Context, scope *topology.Domain, class string) (int, bool) {
	key := topology.TopologyKeyCluster
	if scope != nil {
		key = scope.Key
	}
	l := sr.s.Level(key)
	li, err := sr.s.LevelIndex(ctx, l, class)
	if err != nil {
		return 0, false
	}
	if scope == nil {
		total := 0
		for _, e := range li.Entries() {
			total += e.Free()
		}
		return total, true
	}
	if scope.Key == l.Key && len(scope.Nodes) > 0 {
		if e := li.Of(scope.Nodes[0]); e != nil && e.Domain().ID == scope.ID && len(e.Domain().Nodes) == len(scope.Nodes) {
			return e.Free(), true
		}
	}
	return 0, false // a narrowed scope: not counted
}

// firstNode is a domain's first node ("" when it has none).
func firstNode(d *topology.Domain) string {
	if len(d.Nodes) == 0 {
		return ""
	}
	return d.Nodes[0]
}

// usedBy lists the nodes a leaf's placement since m uses (none for a
// composite: its own children's tries cover it).
func (sr *searcher) usedBy(g *Group, m mark) []string {
	var out []string
	for _, p := range sr.stack[m.stack:] {
		if p.g == g && p.d != nil {
			for _, pp := range p.d.Pods {
				if !slices.Contains(out, pp.Node) {
					out = append(out, pp.Node)
				}
			}
		}
	}
	return out
}

// narrowed is a domain less some nodes, keyed by what it holds.
type narrowed struct {
	dom *topology.Domain
	key string
}

// without is d less node (d nil: every node of the snapshot less node):
// a domain of d's key and id with fewer nodes.
func (sr *searcher) without(d *topology.Domain, node string) narrowed {
	var nodes []string
	if d == nil {
		d = &topology.Domain{Key: topology.TopologyKeyCluster, ID: topology.ClusterDomainID, Level: -1}
		for _, ns := range sr.s.Nodes() {
			nodes = append(nodes, ns.Name())
		}
	} else {
		nodes = d.Nodes
	}
	out := *d
	out.Nodes = slices.DeleteFunc(slices.Clone(nodes), func(n string) bool { return n == node })
	return narrowed{dom: &out, key: strings.Join(out.Nodes, ",")}
}
