package node

import (
	"context"
	"maps"
	"slices"
	"sync"
	"time"

	"k8s.io/dynamic-resource-allocation/kubeletplugin"
)

// watch sends the current health of all devices seen so far at once (as
// soon as the first report arrived), again on every change, and at least
// every resend, until ctx is done. Several watches may run at the same time
// (the kubelet reconnecting).
func (h *healthHub) watch(ctx context.Context, reports chan<- kubeletplugin.DeviceHealthReport, resend time.Duration) error {
	ticker := time.NewTicker(resend)
	defer ticker.Stop()
	for {
		report, ok, changed := h.snapshot()
		if ok {
			select {
			case <-ctx.Done():
				return nil
			case reports <- report:
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
		case <-ticker.C:
		}
	}
}

// healthHub keeps the latest health of each device and wakes watchers.
type healthHub struct {
	now     func() time.Time
	mu      sync.Mutex
	devices map[string]kubeletplugin.DeviceHealth
	changed chan struct{}
}

func newHealthHub(now func() time.Time) *healthHub {
	return &healthHub{now: now, devices: map[string]kubeletplugin.DeviceHealth{}, changed: make(chan struct{})}
}

// run merges updates until ctx is done or updates is closed.
func (h *healthHub) run(ctx context.Context, updates <-chan kubeletplugin.DeviceHealthReport) {
	for {
		select {
		case <-ctx.Done():
			return
		case r, ok := <-updates:
			if !ok {
				return
			}
			h.update(r)
		}
	}
}

func (h *healthHub) update(r kubeletplugin.DeviceHealthReport) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, dh := range r.Devices {
		if dh.LastUpdated.IsZero() {
			dh.LastUpdated = h.now()
		}
		h.devices[dh.PoolName+"/"+dh.DeviceName] = dh
	}
	close(h.changed)
	h.changed = make(chan struct{})
}

// snapshot returns all devices' health (sorted), whether there is any, and
// a channel closed at the next change.
func (h *healthHub) snapshot() (kubeletplugin.DeviceHealthReport, bool, <-chan struct{}) {
	h.mu.Lock()
	defer h.mu.Unlock()
	var r kubeletplugin.DeviceHealthReport
	for _, k := range slices.Sorted(maps.Keys(h.devices)) {
		r.Devices = append(r.Devices, h.devices[k])
	}
	return r, len(r.Devices) > 0, h.changed
}
