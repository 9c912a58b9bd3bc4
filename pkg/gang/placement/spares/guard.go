package spares

import (
	"fmt"
	"strings"

	"github.com/gpufabric/gpufabric/pkg/gang/placement/index"
	"github.com/gpufabric/gpufabric/pkg/topology"
)

// Guard answers, for one Place call of a new gang, whether a node is a
// kept spare. A nil Guard hides nothing (spares off, or a replacement).
type Guard struct {
	p     Policy
	level *topology.Level
	gpus  func(node string) NodeGPUs
	// open are the domains whose spares the gang may use (those of its
	// previous nodes); counted the domains computed so far.
	open    map[*topology.Domain]bool
	counted map[*topology.Domain]map[string]bool
}

// NewGuard returns the Guard of one Place call on s, or nil when the policy
// keeps no spares or the gang has members bound (a late member: it may use
// its domain's spares). previous are the nodes a gang restarting whole ran
// on: it may use the spares of their domains.
func NewGuard(p Policy, s *index.Snapshot, bound, previous []string) *Guard {
	if !p.On() || len(bound) > 0 {
		return nil
	}
	g := &Guard{p: p, level: s.Level(p.Key()), open: map[*topology.Domain]bool{}, counted: map[*topology.Domain]map[string]bool{},
		gpus: func(n string) NodeGPUs { return OfSnapshotNode(s.Node(n)) }}
	for _, n := range previous {
		if d := g.level.DomainOf(n); d != nil {
			g.open[d] = true
		}
	}
	return g
}

// domain returns the node's domain, or nil when its spares are open to
// the gang (or it is in no domain of the level).
func (g *Guard) domain(node string) *topology.Domain {
	if d := g.level.DomainOf(node); d != nil && !g.open[d] {
		return d
	}
	return nil
}

// Hides reports whether the node is a kept spare the gang may not use. A
// domain's kept nodes are found once, from its last node backwards, until
// PerDomain wholly free ones are found: as CountDomain keeps them.
func (g *Guard) Hides(node string) bool {
	if g == nil {
		return false
	}
	d := g.domain(node)
	if d == nil {
		return false
	}
	kept := g.counted[d]
	if kept == nil {
		kept = map[string]bool{}
		for i := len(d.Nodes) - 1; i >= 0 && len(kept) < g.p.PerDomain; i-- {
			if g.gpus(d.Nodes[i]).WhollyFree() {
				kept[d.Nodes[i]] = true
			}
		}
		g.counted[d] = kept
	}
	return kept[node]
}

// maxNamed bounds the domains a refusal names.
const maxNamed = 3

// Explain says, for a refused domain of any level, which of its spare
// domains keep free nodes from the gang ("" when none does), and what
// would help; at most maxNamed domains are named.
func (g *Guard) Explain(d *topology.Domain) (why, action string) {
	if g == nil || d == nil {
		return "", ""
	}
	var parts []string
	seen, n := map[*topology.Domain]bool{}, 0
	for _, node := range d.Nodes {
		sd := g.domain(node)
		if sd == nil || seen[sd] {
			continue
		}
		seen[sd] = true
		if c := CountDomain(sd, g.p.PerDomain, g.gpus); len(c.Kept) > 0 {
			if n++; n <= maxNamed {
				parts = append(parts, fmt.Sprintf("domain %s: %s", c.ID, keptText(c)))
			}
		}
	}
	if n == 0 {
		return "", ""
	}
	if n > maxNamed {
		parts = append(parts, fmt.Sprintf("and %d more domains", n-maxNamed))
	}
	why = fmt.Sprintf("%s (--spare-nodes-per-domain=%d)", strings.Join(parts, "; "), g.p.PerDomain)
	action = "wait for nodes to free up (spares are kept for replacements), or ask the operator to lower --spare-nodes-per-domain or set --spares-for-new-gangs"
	return why, action
}

// keptText is "its 2 free nodes are spares kept for replacements", or "2 of
// its 5 free nodes are ...".
func keptText(d Domain) string {
	are := "are spares"
	if len(d.Kept) == 1 {
		are = "is a spare"
	}
	switch {
	case len(d.Free) == 1:
		return "its 1 free node is a spare kept for replacements"
	case len(d.Kept) == len(d.Free):
		return fmt.Sprintf("its %d free nodes %s kept for replacements", len(d.Free), are)
	}
	return fmt.Sprintf("%d of its %d free nodes %s kept for replacements", len(d.Kept), len(d.Free), are)
}
