package placement

import (
	"context"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/gpufabric/gpufabric/pkg/gang/placement/index"
)

// GreedyOnly turns the search over member placements off (search.go), as
// the engine was before it: tests count the gangs only the search places.
func GreedyOnly(cfg *Config) { cfg.greedyOnly = true }

// OldRails turns rail alignment back to what it was before the search over
// rail sets: required alignment refills only with the four most used rail
// sets of the first fill (no device on every rail), and NICs do not follow
// their GPUs. Benchmarks and tests compare the two.
func OldRails(cfg *Config) { cfg.oldRails = true }

// WithAllocator makes the Place calls of cfg call f instead of the
// structured allocator (index.Snapshot.Allocate): tests give a fake slow
// allocator that counts its calls and reports times from a fake clock.
func WithAllocator(cfg *Config, f func(ctx context.Context, ns *index.NodeState, claims []*resourceapi.ResourceClaim, classes []string, inflight index.InFlight) (index.Allocation, error)) {
	cfg.allocate = f
}
