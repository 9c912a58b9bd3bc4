package placement

import (
	"github.com/gpufabric/gpufabric/pkg/gang/placement/cost"
	"github.com/gpufabric/gpufabric/pkg/gang/placement/index"
	"github.com/gpufabric/gpufabric/pkg/gang/placement/spares"
)

// Config tunes the engine and the snapshots it places on. The zero value
// is usable.
type Config struct {
	// Index configures the snapshots (index.NewSnapshot, index.NewCache);
	// Place does not read it.
	Index index.Config
	// CompareDomains is how many domains with the same leftover the engine
	// verifies to compare rail alignment before it picks one. Default 4.
	CompareDomains int
	// MaxSharedAnchors bounds how many nodes of one domain are tried as the
	// anchor for the gang's shared claims. Default 16.
	MaxSharedAnchors int
	// PackOrder is how a domain's nodes are taken (packorder.go). Default
	// PackLeastSpread.
	PackOrder PackOrder
	// Budget bounds one Place call's Allocate calls (a count, and a
	// deadline the scheduler sets per attempt); a Place that spends it is
	// refused as timed out (allocator.go, docs/design/cost.md). The zero
	// value is cost.DefaultCalls plus cost.CallsPerMember per member, no
	// deadline.
	Budget cost.Budget
	// LargeGangGPUs: a gang of at least this many devices tries domains
	// without fabric trouble first (package fabricrank). 0: off.
	LargeGangGPUs int
	// Spares keeps nodes of every domain of a level free from new gangs
	// for replacements (pkg/gang/placement/spares). Zero: none.
	Spares spares.Policy

	// allocate replaces index.Snapshot.Allocate (tests: a fake slow
	// allocator, WithAllocator in export_test.go).
	allocate allocFunc
	// greedyOnly turns the search (search.go) off, for tests that measure
	// what it adds (GreedyOnly in export_test.go).
	greedyOnly bool
	// oldRails: rail alignment as before the search over rail sets (the
	// four most used sets of the first fill, no NICs following their
	// GPUs), for comparisons (OldRails in export_test.go).
	oldRails bool
}

func (c Config) withDefaults() Config {
	if c.CompareDomains <= 0 {
		c.CompareDomains = 4
	}
	if c.MaxSharedAnchors <= 0 {
		c.MaxSharedAnchors = 16
	}
	if c.PackOrder == "" {
		c.PackOrder = PackLeastSpread
	}
	return c
}
