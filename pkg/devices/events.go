package devices

import (
	"context"
	"fmt"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"k8s.io/klog/v2"
)

// EventKind is what a GPU reported through its NVML event set.
type EventKind string

const (
	// EventXID is a critical Xid error; Event.XID holds its number.
	EventXID EventKind = "xid"
	// EventDoubleBitECC is an uncorrectable (double-bit) ECC error.
	EventDoubleBitECC EventKind = "ecc-double-bit"
	// EventSingleBitECC is a corrected (single-bit) ECC error.
	EventSingleBitECC EventKind = "ecc-single-bit"
	// EventGPULost is a GPU that stopped answering while events were
	// awaited; UUID is empty when NVML could not say which.
	EventGPULost EventKind = "gpu-lost"
)

// Event is one hardware event of a GPU.
type Event struct {
	// UUID names the GPU; empty when NVML could not say which.
	UUID string
	Kind EventKind
	// XID is the Xid number of an EventXID.
	XID  uint64
	Time time.Time
}

// eventMask is every event kind the monitor asks for.
const eventMask = nvml.EventTypeXidCriticalError | nvml.EventTypeDoubleBitEccError | nvml.EventTypeSingleBitEccError

// eventWait is how long one Wait blocks: the monitor checks ctx in between.
const eventWait = 500 * time.Millisecond

// WatchEvents registers every GPU of lib for Xid and ECC events in one
// NVML event set and sends what arrives on out until ctx is done (then it
// returns nil). Rules: a GPU that cannot be registered (no handle, events
// not supported) is logged and left unwatched, the others are watched; a
// Wait that reports ERROR_GPU_IS_LOST sends an EventGPULost without a
// GPU; an event whose GPU has no UUID is sent without one; other Wait
// errors are logged and retried after a second. Only a
// failure to use NVML at all (Init, count, event set) is an error.
func WatchEvents(ctx context.Context, lib nvml.Interface, out chan<- Event) error {
	logger := klog.FromContext(ctx)
	if ret := lib.Init(); ret != nvml.SUCCESS {
		return fmt.Errorf("init nvml: %w", ret)
	}
	defer func() { _ = lib.Shutdown() }()
	set, ret := lib.EventSetCreate()
	if ret != nvml.SUCCESS {
		return fmt.Errorf("create event set: %w", ret)
	}
	defer func() { _ = set.Free() }()
	watched, err := registerEvents(ctx, lib, set)
	if err != nil {
		return err
	}
	logger.Info("Watching GPU events", "gpus", watched)
	for ctx.Err() == nil {
		data, ret := set.Wait(uint32(eventWait.Milliseconds()))
		switch ret {
		case nvml.SUCCESS:
			if ev, ok := toEvent(ctx, data); ok {
				send(ctx, out, ev)
			}
		case nvml.ERROR_TIMEOUT:
		case nvml.ERROR_GPU_IS_LOST:
			logger.Error(ret, "A GPU is lost")
			send(ctx, out, Event{Kind: EventGPULost, Time: time.Now()})
			sleep(ctx, time.Second)
		default:
			logger.Error(ret, "Waiting for GPU events failed, retrying")
			sleep(ctx, time.Second)
		}
	}
	return nil
}

func registerEvents(ctx context.Context, lib nvml.Interface, set nvml.EventSet) (int, error) {
	logger := klog.FromContext(ctx)
	count, ret := lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return 0, fmt.Errorf("get gpu count: %w", ret)
	}
	watched := 0
	for i := range count {
		dev, ret := lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			logger.Error(ret, "GPU left unwatched: no handle", "gpuIndex", i)
			continue
		}
		mask := uint64(eventMask)
		if supported, ret := dev.GetSupportedEventTypes(); ret == nvml.SUCCESS {
			mask &= supported
		}
		if ret := dev.RegisterEvents(mask, set); ret != nvml.SUCCESS {
			logger.Error(ret, "GPU left unwatched: cannot register events", "gpuIndex", i)
			continue
		}
		watched++
	}
	return watched, nil
}

// toEvent converts NVML's event data; an event whose GPU cannot be named
// is a lost GPU.
func toEvent(ctx context.Context, data nvml.EventData) (Event, bool) {
	ev := Event{Time: time.Now()}
	switch data.EventType {
	case nvml.EventTypeXidCriticalError:
		ev.Kind, ev.XID = EventXID, data.EventData
	case nvml.EventTypeDoubleBitEccError:
		ev.Kind = EventDoubleBitECC
	case nvml.EventTypeSingleBitEccError:
		ev.Kind = EventSingleBitECC
	default:
		klog.FromContext(ctx).V(4).Info("Ignoring GPU event", "type", data.EventType)
		return Event{}, false
	}
	if data.Device == nil {
		return ev, true
	}
	uuid, ret := data.Device.GetUUID()
	if ret != nvml.SUCCESS {
		klog.FromContext(ctx).Error(ret, "GPU event without a GPU UUID", "kind", ev.Kind, "xid", ev.XID)
		return ev, true
	}
	ev.UUID = uuid
	return ev, true
}

func send(ctx context.Context, out chan<- Event, ev Event) {
	select {
	case out <- ev:
	case <-ctx.Done():
	}
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
