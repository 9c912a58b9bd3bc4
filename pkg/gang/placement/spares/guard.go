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
	counted map[*topology.Domain]*guarded
}

// guarded is a computed domain: its count and its kept nodes.
type guarded struct {
	Domain
	kept map[string]bool
}

// NewGuard returns the Guard of one Place call on s, or nil when the policy
// keeps no spares or the gang has members bound (a late member: it may use
// its domain's spares). previous are the nodes a gang restarting whole ran
// on: it may use the spares of their domains.
func NewGuard(p Policy, s *index.Snapshot, bound, previous []string) *Guard {
	if !p.On() || len(bound) > 0 {
		return nil
	}
	g := &Guard{p: p, level: s.Level(p.Key()), open: map[*topology.Domain]bool{}, counted: map[*topology.Domain]*guarded{},
		gpus: func(n string) NodeGPUs { return OfSnapshotNode(s.Node(n)) }}
	for _, n := range previous {
		if d := g.level.DomainOf(n); d != nil {
			g.open[d] = true
		}
	}
	return g
}

// domain returns the computed domain of a node, or nil when the node's
// spares are open to the gang (or it is in no domain of the level).
func (g *Guard) domain(node string) *guarded {
	d := g.level.DomainOf(node)
	if d == nil || g.open[d] {
		return nil
	}
	c := g.counted[d]
	if c == nil {
		c = &guarded{Domain: CountDomain(d, g.p.PerDomain, g.gpus), kept: map[string]bool{}}
		for _, n := range c.Kept {
			c.kept[n] = true
		}
		g.counted[d] = c
	}
	return c
}

// Hides reports whether the node is a kept spare the gang may not use.
func (g *Guard) Hides(node string) bool {
	if g == nil {
		return false
	}
	c := g.domain(node)
	return c != nil && c.kept[node]
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
	seen, n := map[*guarded]bool{}, 0
	for _, node := range d.Nodes {
		c := g.domain(node)
		if c == nil || seen[c] || len(c.Kept) == 0 {
			continue
		}
		seen[c] = true
		if n++; n <= maxNamed {
			parts = append(parts, fmt.Sprintf("domain %s: %s", c.ID, keptText(c.Domain)))
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
