package inspect

import (
	"fmt"
	"io"
	"strings"

	"github.com/gpufabric/gpufabric/pkg/gang/placement/spares"
	"github.com/gpufabric/gpufabric/pkg/topology"
)

// SparesStatus is the spare nodes per domain the scheduler keeps for
// replacements (its --spare-nodes-per-domain and --spare-level, given to
// status as the same flags).
type SparesStatus struct {
	PerDomain int    `json:"perDomain"`
	Level     string `json:"level"`
	// Kept are the wholly free nodes kept from new gangs, InUse the spares
	// missing (PerDomain less kept: taken by replacements, or by gangs
	// placed before the setting), over every domain of the level.
	Kept  int `json:"kept"`
	InUse int `json:"inUse"`
	// Domains of the level with a GPU, by id.
	Domains []SpareDomain `json:"domains"`
}

// SpareDomain is one domain's spares.
type SpareDomain struct {
	ID string `json:"id"`
	// FreeNodes are its wholly free nodes; Kept the spares among them.
	FreeNodes int      `json:"freeNodes"`
	Kept      []string `json:"kept"`
	InUse     int      `json:"inUse"`
}

// spareStatus counts the spares of the policy's level, as the scheduler
// does (pkg/gang/placement/spares); nil when the policy keeps none.
func spareStatus(ix *index, p spares.Policy) (*SparesStatus, error) {
	if p.PerDomain <= 0 {
		return nil, nil
	}
	l := ix.tree.Level(p.Key())
	if l == nil {
		return nil, fmt.Errorf("spare level %s is no level of the fabric (--topology-levels)", p.Key())
	}
	st := &SparesStatus{PerDomain: p.PerDomain, Level: l.Key, Domains: []SpareDomain{}}
	for _, d := range spares.Count(l, p.PerDomain, func(n string) spares.NodeGPUs { return nodeGPUsOf(ix, n) }) {
		st.Domains = append(st.Domains, SpareDomain{ID: d.ID, FreeNodes: len(d.Free), Kept: d.Kept, InUse: d.Missing})
		st.Kept += len(d.Kept)
		st.InUse += d.Missing
	}
	return st, nil
}

// nodeGPUsOf is a node as pkg/gang/placement/spares counts it.
func nodeGPUsOf(ix *index, node string) spares.NodeGPUs {
	n := spares.NodeGPUs{Usable: spares.UsableNode(ix.nodes[node])}
	for _, d := range ix.byNode[node] {
		_, held := ix.holder[d.key()]
		switch {
		case d.Type == topology.DeviceTypeGPU:
			n.GPUs++
			if held {
				n.Held++
			}
			if d.blocked() {
				n.Usable = false
			}
		case d.Type == topology.DeviceTypeMIG && held:
			n.Held++
		}
	}
	return n
}

// maxShortShown bounds the domains short of spares a status line names.
const maxShortShown = 3

// renderSpares prints one line: the spares kept and in use, and the
// domains short of spares (at most maxShortShown named).
func renderSpares(w io.Writer, s *SparesStatus) {
	if s == nil {
		return
	}
	var short []string
	n := 0
	for _, d := range s.Domains {
		if d.InUse > 0 {
			if n++; n <= maxShortShown {
				short = append(short, fmt.Sprintf("%s (%d of %d kept)", d.ID, len(d.Kept), s.PerDomain))
			}
		}
	}
	line := fmt.Sprintf("Spares (%d per %s, kept for replacements): %d kept, %d in use", s.PerDomain, s.Level, s.Kept, s.InUse)
	if n > 0 {
		if n > maxShortShown {
			short = append(short, fmt.Sprintf("and %d more", n-maxShortShown))
		}
		line += "; short: " + strings.Join(short, ", ")
	}
	fmt.Fprintln(w, line)
}
