package placementtest

import (
	"fmt"

	"github.com/gpufabric/gpufabric/pkg/gang/placement"
)

// checkSegments: for a segmented gang with no running members, the
// decision places whole segments (members [k*size, (k+1)*size) of
// g.Members, which is in rank order), the members of each on nodes of one
// domain of the segment level (a node without the level's label is in
// none), and Decision.Segments says which. Late members (g.Running) are
// left to their tests.
func (c *Checker) checkSegments(g *placement.Gang, d *placement.Decision) error {
	if g.SegmentSize <= 0 || len(g.Running) > 0 {
		return nil
	}
	rank := map[string]int{}
	for i, m := range g.Members {
		rank[m.Pod.Name] = i
	}
	domains := map[int]map[string]bool{}
	count := map[int]int{}
	for _, pp := range d.Pods {
		s := rank[pp.Name] / g.SegmentSize
		n := c.nodes[pp.Node]
		if n == nil {
			return fmt.Errorf("pod %s on unknown node %s", pp.Name, pp.Node)
		}
		if domains[s] == nil {
			domains[s] = map[string]bool{}
		}
		domains[s][c.domainOf(g.SegmentTopologyKey, n)] = true
		count[s]++
	}
	for s, n := range count {
		if n != g.SegmentSize {
			return fmt.Errorf("segment %d: %d of its %d members placed", s, n, g.SegmentSize)
		}
		if len(domains[s]) != 1 {
			return fmt.Errorf("segment %d spans %d domains of %s: %v", s, len(domains[s]), g.SegmentTopologyKey, domains[s])
		}
	}
	if len(d.Segments) != len(count) {
		return fmt.Errorf("decision lists %d segments, places %d", len(d.Segments), len(count))
	}
	for _, sp := range d.Segments {
		if !domains[sp.Index][sp.Domain] || sp.Pods != g.SegmentSize {
			return fmt.Errorf("decision says segment %d is %d pods in %s; its members are in %v", sp.Index, sp.Pods, sp.Domain, domains[sp.Index])
		}
	}
	return nil
}
