package rails

import (
	"context"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/gpufabric/gpufabric/pkg/gang/placement/index"
)

// Shape is what the rail searches read of a member's shape (the engine's
// shape, shared, never changed here).
type Shape struct {
	// Need is a lower bound of devices per class; Classes lists its keys.
	Need    map[string]int
	Classes []string
	// Claims to allocate, and all classes they use.
	Claims     []*resourceapi.ResourceClaim
	AllClasses []string
}

// Members are a gang's members for one Place call.
type Members struct {
	// Class is the main class; Per each member's shape; Distinct the
	// distinct ones; IDs, per member, the index of its shape in Distinct.
	Class    string
	Per      []*Shape
	Distinct []*Shape
	IDs      []int
	// Within, when set, are the only rails the members may use (the
	// engine's Gang.Rails: their claims are limited to them): devices on
	// other rails are not counted free.
	Within []int64
}

// Allocator is the engine's allocator for one Place call: member claims
// on a node next to the in-flight allocations, within the call's budget;
// nil results and the failed check when refused.
type Allocator interface {
	Allocate(ctx context.Context, ns *index.NodeState, claims []*resourceapi.ResourceClaim, classes []string,
		inflight index.InFlight) ([]resourceapi.AllocationResult, string, error)
}

// Fits is the engine's cheap per-node check: how many members of the
// distinct shape fit on the node, before any Allocate call.
type Fits interface {
	FitOn(ctx context.Context, ns *index.NodeState, shape int) (int, error)
}

// Stats are the engine's counters the rail searches add to
// (placement.Stats.RailCutoffs and RailFollowCalls).
type Stats struct {
	Cutoffs     *int
	FollowCalls *int
}
