package node

import (
	"errors"

	"github.com/gpufabric/gpufabric/pkg/claims"
	"github.com/gpufabric/gpufabric/pkg/claims/checkpoint"
)

// Per-claim errors. The returned errors wrap one of these; the wording after
// it names the claim's device and, for double-booking, the other claim.
var (
	// ErrNotAllocated: the claim has no status.allocation.
	ErrNotAllocated = errors.New("claim is not allocated")
	// ErrNoDevices: the allocation has no result for this driver. The
	// kubelet only sends claims with such results, so this is a bug
	// somewhere; the claim fails rather than run without its devices.
	ErrNoDevices = errors.New("claim has no devices of this driver")
	// ErrNotOnNode: a node-local device of another node's pool.
	ErrNotOnNode = errors.New("device is not on this node")
	// ErrDoubleBooked: a device is already prepared for another claim.
	ErrDoubleBooked = errors.New("device is already prepared for another claim")
	// ErrResolve: the resolver could not tell what the device needs.
	ErrResolve = errors.New("resolve device")
	// ErrCDI: the CDI spec could not be built or written.
	ErrCDI = errors.New("cdi spec")
	// ErrCheckpoint: the checkpoint could not be read or written.
	ErrCheckpoint = errors.New("checkpoint")
	// ErrConfig: a gpufabric.dev opaque config of the claim is invalid.
	ErrConfig = errors.New("invalid opaque config")
)

// reason is the metric label of an error.
func reason(err error) string {
	switch {
	case errors.Is(err, ErrNotAllocated):
		return "not_allocated"
	case errors.Is(err, ErrNoDevices):
		return "no_devices"
	case errors.Is(err, ErrNotOnNode):
		return "not_on_node"
	case errors.Is(err, ErrDoubleBooked):
		return "double_booked"
	case errors.Is(err, ErrConfig):
		return "config"
	case errors.Is(err, claims.ErrIMEXNotReady), errors.Is(err, claims.ErrIMEXUnavailable):
		return "imex"
	case errors.Is(err, claims.ErrUnknownDevice):
		return "unknown_device"
	case errors.Is(err, ErrResolve):
		return "resolve"
	case errors.Is(err, ErrCDI):
		return "cdi"
	case errors.Is(err, ErrCheckpoint), errors.Is(err, checkpoint.ErrCorrupt):
		return "checkpoint"
	}
	return "other"
}
