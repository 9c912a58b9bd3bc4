package spares

import (
	"fmt"
	"slices"

	"github.com/gpufabric/gpufabric/pkg/topology"
)

// MaxPerDomain bounds Policy.PerDomain.
const MaxPerDomain = 1024

// Policy is the operator's setting. The zero value keeps no spares.
type Policy struct {
	// PerDomain nodes of every domain of the level are kept wholly free
	// for replacements (--spare-nodes-per-domain); 0: off.
	PerDomain int `json:"perDomain,omitempty"`
	// Level is the topology key of the domains (--spare-level): a level of
	// the fabric tree; "" is the NVLink domain.
	Level string `json:"level,omitempty"`
	// ForNewGangs lets new gangs take spares too (--spares-for-new-gangs):
	// the spares are still counted and shown, not kept.
	ForNewGangs bool `json:"forNewGangs,omitempty"`
}

// On reports whether new gangs are kept off spares.
func (p Policy) On() bool { return p.PerDomain > 0 && !p.ForNewGangs }

// Key is the topology key of the spare domains.
func (p Policy) Key() string {
	if p.Level == "" {
		return topology.TopologyKeyNVLinkDomain
	}
	return p.Level
}

// Validate checks the policy against the fabric's label levels (the
// scheduler's --topology-levels): PerDomain 0..MaxPerDomain, Level the
// NVLink domain or one of the label levels.
func (p Policy) Validate(labelLevels []string) error {
	if p.PerDomain < 0 || p.PerDomain > MaxPerDomain {
		return fmt.Errorf("spare nodes per domain must be 0..%d, got %d", MaxPerDomain, p.PerDomain)
	}
	if k := p.Key(); k != topology.TopologyKeyNVLinkDomain && !slices.Contains(labelLevels, k) {
		return fmt.Errorf("spare level %q is no level of the fabric: use %s or one of the topology levels %v", k, topology.TopologyKeyNVLinkDomain, labelLevels)
	}
	return nil
}
