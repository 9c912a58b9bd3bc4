package fabricrank

import (
	"fmt"

	"github.com/gpufabric/gpufabric/pkg/gang/placement/index"
	"github.com/gpufabric/gpufabric/pkg/topology"
)

// Sick returns how many devices of the domain's nodes report link
// trouble; nodes not in the snapshot count none.
func Sick(s *index.Snapshot, d *topology.Domain) int {
	n := 0
	for _, name := range d.Nodes {
		if ns := s.Node(name); ns != nil {
			n += ns.FabricSick()
		}
	}
	return n
}

// Order returns entries with the healthy domains first and then the sick
// ones, each group in the given order, and how many are healthy. It
// returns entries itself when none is sick.
func Order(s *index.Snapshot, entries []*index.DomainEntry) ([]*index.DomainEntry, int) {
	var sick []*index.DomainEntry
	var healthy []*index.DomainEntry
	for i, e := range entries {
		if Sick(s, e.Domain()) == 0 {
			if sick != nil {
				healthy = append(healthy, e)
			}
			continue
		}
		if sick == nil {
			healthy = append(make([]*index.DomainEntry, 0, len(entries)), entries[:i]...)
		}
		sick = append(sick, e)
	}
	if sick == nil {
		return entries, len(entries)
	}
	return append(healthy, sick...), len(healthy)
}

// Note says what fabric health did for a large gang placed in the entry
// at position at of the ordered candidates, of which the first healthy
// are healthy; "" when it made no difference (no sick candidate came
// before the chosen one in the engine's order) or healthy < 0 (the gang
// was not ranked).
func Note(s *index.Snapshot, ordered []*index.DomainEntry, healthy, at int) string {
	if healthy < 0 || at >= len(ordered) {
		return ""
	}
	chosen := ordered[at]
	if at >= healthy {
		return fmt.Sprintf("fabric health: only domains with link errors or degraded links had room; %s has %d such devices",
			chosen.Domain().ID, Sick(s, chosen.Domain()))
	}
	passed := 0
	for _, e := range ordered[healthy:] {
		if e.Before(chosen) {
			passed++
		}
	}
	if passed == 0 {
		return ""
	}
	return fmt.Sprintf("fabric health: chose %s, whose devices report no link errors, over %d better-fitting domains with link errors or degraded links",
		chosen.Domain().ID, passed)
}
