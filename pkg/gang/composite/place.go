package composite

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/gpufabric/gpufabric/pkg/gang/placement"
	"github.com/gpufabric/gpufabric/pkg/gang/placement/index"
	"github.com/gpufabric/gpufabric/pkg/topology"
)

// Options bound one tree's search.
type Options struct {
	// PlaceCalls is how many engine Place calls one tree may use (default
	// 64 plus 8 per leaf). The greedy order's calls count too.
	PlaceCalls int
	// Alternatives is how many domains of its level a child is tried in,
	// best fit first (default 8).
	Alternatives int
}

func (o Options) withDefaults(leaves int) Options {
	if o.PlaceCalls <= 0 {
		o.PlaceCalls = 64 + 8*leaves
	}
	if o.Alternatives <= 0 {
		o.Alternatives = 8
	}
	return o
}

// searcher is one Place call.
type searcher struct {
	cfg  placement.Config
	s    *index.Snapshot
	opts Options
	left int
	// stack: what is assumed now, in order: each leaf's decision and each
	// keyed group's domain.
	stack    []placed
	demands  map[*Group]demand
	nodeSets map[*topology.Domain]map[string]bool
	// searching counts the joint searches under way (the budget counts
	// their Place calls only); noSearch, when > 0, keeps children to the
	// greedy order (mostIn's first pass).
	searching, noSearch int
	// placedKids: how many children a composite's last children call
	// placed.
	placedKids map[*Group]int
	// why: each group's last refusal; whyIn: its refusals in the first
	// domains it was tried in (at most maxScopesSaid).
	why   map[*Group]string
	whyIn map[*Group][]string
	stats Stats
	// cp: the tree's rail couplings (coupling.go).
	cp *coupler
}

// placed is one entry of the searcher's stack.
type placed struct {
	g   *Group
	d   *placement.Decision // a leaf's, nil for a domain
	dom *topology.Domain    // a keyed group's domain, nil for a leaf's decision
	// rails: a coupled leaf's IB rails (coupling.go).
	rails []int64
}

// mark is a point to roll the search back to.
type mark struct {
	snap  index.Mark
	stack int
}

// Place places a tree on s: a Decision with each placed leaf's decision,
// or an Unschedulable that names the level and the child that did not
// fit. It leaves s as it found it; the caller assumes the leaves'
// decisions. An error means bad input (an invalid tree: ErrInvalid) or
// the engine's error. A tree with a preferred rail coupling that the
// coupled search refuses is searched again uncoupled (coupling.go).
func Place(ctx context.Context, cfg placement.Config, s *index.Snapshot, root *Group, opts Options) (*Decision, *Unschedulable, error) {
	if err := Validate(root); err != nil {
		return nil, nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if why := sharedAcrossLeaves(root); why != "" {
		return nil, &Unschedulable{Message: why, Stats: Stats{}}, nil
	}
	opts = opts.withDefaults(len(root.leaves()))
	sr := newSearcher(cfg, s, opts, opts.PlaceCalls, Stats{})
	sr.cp = newCoupler(s, root, false, sr.classOf)
	d, u, err := sr.run(ctx, root)
	if err != nil || d != nil || sr.left <= 0 || !preferredIn(root) {
		return d, u, err
	}
	loose := newSearcher(cfg, s, opts, sr.left, sr.stats)
	loose.cp = newCoupler(s, root, true, loose.classOf)
	d, lu, err := loose.run(ctx, root)
	if d != nil {
		d.Coupled = loose.cp.decided(root, loose.stack, u.Message)
	}
	return d, lu, err
}

func newSearcher(cfg placement.Config, s *index.Snapshot, opts Options, left int, stats Stats) *searcher {
	return &searcher{cfg: cfg, s: s, opts: opts, left: left, stats: stats, demands: map[*Group]demand{},
		nodeSets: map[*topology.Domain]map[string]bool{}, why: map[*Group]string{}, whyIn: map[*Group][]string{}, placedKids: map[*Group]int{}}
}

// run is one search over the tree.
func (sr *searcher) run(ctx context.Context, root *Group) (*Decision, *Unschedulable, error) {
	start := sr.mark()
	defer func() { _ = sr.s.Rollback(ctx, start.snap) }() // Place changes nothing
	top := &Group{Name: root.Name, MinGroupCount: 1, Children: []*Group{root}}
	ok, err := sr.children(ctx, top, nil)
	if err != nil {
		return nil, nil, err
	}
	sr.stats.PlaceCallsLeft = sr.left
	if !ok {
		return nil, sr.unschedulable(root), nil
	}
	d := sr.decision(root)
	if d.Pods() == 0 {
		// As kube-scheduler: a tree is placed when it places a pod.
		return nil, sr.nothingNew(root), nil
	}
	return d, nil, nil
}

func (sr *searcher) mark() mark { return mark{snap: sr.s.Mark(), stack: len(sr.stack)} }

func (sr *searcher) release(m mark) { sr.s.Release(m.snap) }

func (sr *searcher) rollback(ctx context.Context, m mark) error {
	sr.stack = sr.stack[:m.stack]
	return sr.s.Rollback(ctx, m.snap)
}

// placeIn places group g inside scope (nil: anywhere): a leaf's gang by
// the engine, a composite's children by the joint search.
func (sr *searcher) placeIn(ctx context.Context, g *Group, scope *topology.Domain) (bool, error) {
	if !g.Leaf() {
		return sr.children(ctx, g, scope)
	}
	if !g.pending() {
		if len(g.Gang.BoundNodes) == 0 {
			sr.why[g] = "it has no members"
			return false, nil
		}
		return true, nil // it runs (pinned inside scope by scopes)
	}
	if sr.searching > 0 {
		if sr.left <= 0 {
			sr.why[g] = "the tree's search ran out of its budget before this child was tried"
			return false, nil
		}
		sr.left--
	}
	sr.stats.PlaceCalls++
	gang := *g.Gang
	gang.Within = scope
	by := sr.cp.gang(g, &gang, sr.stack)
	d, u, err := placement.Place(ctx, sr.cfg, sr.s, &gang)
	if err != nil {
		return false, fmt.Errorf("%s: %w", g.Name, err)
	}
	if d == nil {
		sr.why[g] = u.Message
		if by != nil {
			if sr.why[g], err = sr.cp.why(ctx, g, by, scope, gang.Rails, u); err != nil {
				return false, err
			}
		}
		return false, nil
	}
	if err := placement.Assume(ctx, sr.s, g.Gang, d); err != nil {
		return false, err
	}
	sr.stack = append(sr.stack, sr.cp.placed(g, d))
	return true, nil
}

// children places at least g.MinGroupCount of g's children inside scope,
// as many as it can: first in the greedy order (each child in the first
// of its domains where it fits), then, when that leaves children out, by
// a search with backtracking for a placement of more of them. It never
// places fewer than the greedy order.
func (sr *searcher) children(ctx context.Context, g *Group, scope *topology.Domain) (bool, error) {
	kids := sr.order(g.Children)
	m := sr.mark()
	n, err := sr.greedy(ctx, kids, scope)
	if err != nil || n == len(kids) {
		sr.release(m)
		sr.placedKids[g] = n
		return err == nil, err
	}
	fallback, ok := slices.Clone(sr.stack[m.stack:]), n >= g.MinGroupCount
	if err := sr.rollback(ctx, m); err != nil {
		return false, err
	}
	for target := len(kids); sr.noSearch == 0 && len(kids) > 1 && target > max(n, g.MinGroupCount-1) && sr.left > 0; target-- {
		if !sr.mayHold(ctx, kids, target, scope) {
			continue // the free devices cannot hold that many children
		}
		sr.stats.Searches++
		m := sr.mark()
		sr.searching++
		ok, err := sr.dfs(ctx, kids, 0, 0, target, scope)
		sr.searching--
		if err != nil || ok {
			sr.release(m)
			sr.placedKids[g] = target
			return ok, err
		}
		if err := sr.rollback(ctx, m); err != nil {
			return false, err
		}
	}
	if !ok {
		sr.why[g] = sr.childrenWhy(g, kids, n, scope)
		return false, nil
	}
	sr.placedKids[g] = n
	return true, sr.restore(ctx, fallback)
}

// greedy places each child in turn in the first of its domains where it
// fits (a composite: in the domain where the most of its children fit,
// as kube-scheduler scores a composite's placements by the pods they
// place), skipping those that fit nowhere; it returns how many it placed.
func (sr *searcher) greedy(ctx context.Context, kids []*Group, scope *topology.Domain) (int, error) {
	n := 0
	for _, kid := range kids {
		var ok bool
		var err error
		switch {
		case kid.Leaf() && kid.pending():
			ok, err = sr.greedyLeaf(ctx, kid, scope)
		case kid.Leaf() || kid.TopologyKey == "":
			ok, err = sr.tryScopes(ctx, kid, scope, nil)
		default:
			ok, err = sr.mostIn(ctx, kid, scope)
		}
		if err != nil {
			return n, err
		}
		if ok {
			n++
		}
	}
	return n, nil
}

// mostIn places composite kid in the domain of its level where the most
// of its children fit: first in the greedy order in every domain (as
// kube-scheduler tries every domain of a composite's level, best fit
// first here, stopping at one where all fit), then, when none holds them
// all, with the joint search in the domains where the greedy order placed
// the most (at most Options.Alternatives of them, within the budget). It
// never places fewer children than the greedy order's best domain.
func (sr *searcher) mostIn(ctx context.Context, kid *Group, scope *topology.Domain) (bool, error) {
	doms, why, err := sr.scopes(ctx, kid, scope)
	if err != nil || len(doms) == 0 {
		sr.why[kid] = why
		return false, err
	}
	var best []placed
	bestN := 0
	counts := make(map[*topology.Domain]int, len(doms))
	try := func(dom *topology.Domain) (all bool, err error) {
		m := sr.mark()
		fit, err := sr.placeIn(ctx, kid, dom)
		if err != nil {
			return false, err
		}
		n := sr.placedKids[kid]
		if fit {
			counts[dom] = max(counts[dom], n)
		}
		if fit && n == len(kid.Children) {
			sr.stack = append(sr.stack, placed{g: kid, dom: dom})
			sr.release(m)
			return true, nil
		}
		if fit && n > bestN {
			best, bestN = append(slices.Clone(sr.stack[m.stack:]), placed{g: kid, dom: dom}), n
		}
		if !fit {
			sr.noteWhy(kid, dom)
		}
		return false, sr.rollback(ctx, m)
	}
	sr.noSearch++
	for _, dom := range doms {
		if all, err := try(dom); err != nil || all {
			sr.noSearch--
			return all, err
		}
	}
	sr.noSearch--
	if sr.searching == 0 {
		promising := slices.Clone(doms)
		slices.SortStableFunc(promising, func(a, b *topology.Domain) int { return counts[b] - counts[a] })
		for _, dom := range promising[:min(len(promising), sr.opts.Alternatives)] {
			if sr.left <= 0 {
				break
			}
			if all, err := try(dom); err != nil || all {
				return all, err
			}
		}
	}
	if bestN == 0 {
		return false, nil
	}
	return true, sr.restore(ctx, best)
}

// greedyLeaf places a waiting leaf inside scope where the engine chooses
// (the best domain of its level among all of them), and records that
// domain.
func (sr *searcher) greedyLeaf(ctx context.Context, kid *Group, scope *topology.Domain) (bool, error) {
	m := sr.mark()
	fit, err := sr.placeIn(ctx, kid, scope)
	if err != nil || !fit {
		sr.release(m) // nothing was assumed
		if err == nil && scope != nil {
			sr.noteWhy(kid, scope)
		}
		return false, err
	}
	if kid.TopologyKey != "" {
		if d := sr.stack[len(sr.stack)-1].d; d != nil {
			if l := sr.s.Level(d.TopologyKey); l != nil && l.Domain(d.Domain) != nil {
				sr.stack = append(sr.stack, placed{g: kid, dom: l.Domain(d.Domain)})
			}
		}
	}
	sr.release(m)
	return true, nil
}

// dfs places kids[i:] so that at least target of all kids are placed:
// each child in each of its domains in turn, then without it, backtracking
// when the rest cannot follow.
func (sr *searcher) dfs(ctx context.Context, kids []*Group, i, placedN, target int, scope *topology.Domain) (bool, error) {
	if placedN+len(kids)-i < target {
		return false, nil
	}
	if i == len(kids) {
		return true, nil
	}
	sr.stats.Nodes++
	ok, err := sr.tryScopes(ctx, kids[i], scope, func() (bool, error) { return sr.dfs(ctx, kids, i+1, placedN+1, target, scope) })
	if err != nil || ok || sr.left <= 0 {
		return ok, err
	}
	return sr.dfs(ctx, kids, i+1, placedN, target, scope)
}

// tryScopes places kid in each of its domains inside scope in turn until
// it fits and then() accepts (nil: at once).
func (sr *searcher) tryScopes(ctx context.Context, kid *Group, scope *topology.Domain, then func() (bool, error)) (bool, error) {
	doms, why, err := sr.scopes(ctx, kid, scope)
	if err != nil {
		return false, err
	}
	if len(doms) == 0 {
		sr.why[kid] = why
		return false, nil
	}
	if then != nil {
		doms = doms[:min(len(doms), sr.opts.Alternatives)] // the search's
	}
	for _, dom := range doms {
		ok, err := sr.tryIn(ctx, kid, dom, scope, then)
		if err != nil || ok || sr.left <= 0 {
			return ok, err
		}
	}
	return false, nil
}

// maxLeafTries bounds how often a leaf is placed in one domain: once, and
// when its siblings cannot follow, again without a node an earlier
// placement there used.
const maxLeafTries = 8

// tryIn places kid in dom until then() accepts (nil: at once); what a
// refused try assumed is rolled back. A leaf that fits but whose siblings
// then do not is placed again on dom less a node one of its placements
// used, so that the search reaches node choices, not only domains; a
// coupled leaf that fixed its coupling's rail set, on other rail sets
// first (coupler.tries, scope: its parent's).
func (sr *searcher) tryIn(ctx context.Context, kid *Group, dom, scope *topology.Domain, then func() (bool, error)) (bool, error) {
	tries, limit := []leafTry{{dom: dom}}, maxLeafTries
	seen := map[string]bool{}
	for i := 0; i < len(tries); i++ {
		m := sr.mark()
		sr.cp.force[kid] = tries[i].rails
		fit, err := sr.placeIn(ctx, kid, tries[i].dom)
		delete(sr.cp.force, kid)
		ok := fit
		var used []string
		var sets [][]int64
		if err == nil && fit {
			used = sr.usedBy(kid, m)
			if i == 0 {
				sets, err = sr.cp.tries(ctx, kid, scope, sr.stack, m.stack)
			}
			if kid.TopologyKey != "" {
				sr.stack = append(sr.stack, placed{g: kid, dom: dom})
			}
			if then != nil && err == nil {
				ok, err = then()
			}
		}
		if err != nil || ok {
			sr.release(m)
			return ok, err
		}
		if err := sr.rollback(ctx, m); err != nil {
			return false, err
		}
		if !fit && i == 0 {
			sr.noteWhy(kid, dom)
		}
		if sr.left <= 0 {
			break
		}
		for _, set := range sets {
			tries, limit = append(tries, leafTry{dom: dom, rails: set}), limit+2
		}
		for _, n := range used {
			if t := sr.without(tries[i].dom, n); len(tries) < limit && !seen[t.key+railsKey(tries[i].rails)] {
				seen[t.key+railsKey(tries[i].rails)] = true
				tries = append(tries, leafTry{dom: t.dom, rails: tries[i].rails})
			}
		}
	}
	return false, nil
}

// leafTry is one placement of a leaf in tryIn: in dom, on the rails
// (nil: as its coupling says).
type leafTry struct {
	dom   *topology.Domain
	rails []int64
}

// noteWhy keeps a group's refusal in dom for the message.
func (sr *searcher) noteWhy(g *Group, dom *topology.Domain) {
	if dom != nil && len(sr.whyIn[g]) < maxScopesSaid {
		sr.whyIn[g] = append(sr.whyIn[g], fmt.Sprintf("in %s %s: %s", dom.Key, dom.ID, cut(sr.why[g])))
	}
}

// restore assumes a saved part of the stack again.
func (sr *searcher) restore(ctx context.Context, saved []placed) error {
	for _, p := range saved {
		if p.d != nil {
			if err := placement.Assume(ctx, sr.s, p.g.Gang, p.d); err != nil {
				return err
			}
		}
		sr.stack = append(sr.stack, p)
	}
	return nil
}

// order returns the children in the order they are tried: those with
// members running first (they are pinned), then the largest demand first
// (the most constrained), then by name.
func (sr *searcher) order(kids []*Group) []*Group {
	out := slices.Clone(kids)
	least := func(g *Group) int {
		d, err := sr.demandOf(g)
		if err != nil {
			return 0 // the engine reports the error when the child is placed
		}
		return d.least
	}
	slices.SortStableFunc(out, func(a, b *Group) int {
		ra, rb := len(a.runningNodes()) > 0, len(b.runningNodes()) > 0
		switch {
		case ra != rb && ra:
			return -1
		case ra != rb:
			return 1
		case least(a) != least(b):
			return least(b) - least(a)
		}
		return strings.Compare(a.Name, b.Name)
	})
	return out
}
