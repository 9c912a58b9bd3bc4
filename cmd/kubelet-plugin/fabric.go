package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"

	"github.com/gpufabric/gpufabric/pkg/claims/node"
	"github.com/gpufabric/gpufabric/pkg/devices"
	"github.com/gpufabric/gpufabric/pkg/devices/fabrichealth"
	"github.com/gpufabric/gpufabric/pkg/topology"
)

// Node event reasons of fabric health.
const (
	reasonFabricErrors        = "FabricErrors"
	reasonFabricErrorsCleared = "FabricErrorsCleared"
)

// maxFabricEvents bounds the Node events of one health interval: past it
// one event counts the rest.
const maxFabricEvents = 8

// fabricHealth reads the devices' link error counters every health
// interval and keeps what the pool publishes from them: each device's
// fabricErrors attribute and, past the threshold, its fabric-errors taint.
type fabricHealth struct {
	tracker *fabrichealth.Tracker
	// health is the last observation, by device name.
	health map[string]fabrichealth.Health
}

func newFabricHealth(cfg fabrichealth.Config) *fabricHealth {
	return &fabricHealth{tracker: fabrichealth.NewTracker(cfg), health: map[string]fabrichealth.Health{}}
}

// observe reads the counters of inv's GPUs and NICs through b, and
// returns the Node events of devices whose taint came or went (at most
// maxFabricEvents, then one that counts the rest).
func (f *fabricHealth) observe(ctx context.Context, b devices.Backend, inv *devices.Inventory, now time.Time) []node.Event {
	var gpus []fabrichealth.GPU
	for _, g := range inv.GPUs {
		gpus = append(gpus, fabrichealth.GPU{Name: g.Name, Index: g.Index, UUID: g.UUID})
	}
	var ports []fabrichealth.Port
	for _, n := range inv.NICs {
		ports = append(ports, fabrichealth.Port{Name: n.Name, IBDevice: n.IBDevice, Port: n.Port})
	}
	sample := append(fabrichealth.ReadNVLinks(ctx, b.NVML(), gpus), fabrichealth.ReadIBPorts(ctx, b.SysfsRoot(), ports)...)
	next := f.tracker.Observe(now, sample)
	var events []node.Event
	cfg := f.tracker.Config()
	names := make([]string, 0, len(next)+len(f.health))
	for name := range next {
		names = append(names, name)
	}
	for name := range f.health {
		if _, ok := next[name]; !ok {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	dropped := 0
	for _, name := range names {
		before, after := f.health[name], next[name]
		var ev node.Event
		switch {
		case after.Tainted && !before.Tainted:
			ev = node.Event{Type: corev1.EventTypeWarning, Reason: reasonFabricErrors, Message: fmt.Sprintf(
				"%s: %s rose by %d in %s (%d link errors in all, threshold %d): taint %s=%s:NoSchedule",
				name, after.Counter, after.Increase, cfg.Window, after.Errors, cfg.Threshold, topology.TaintFabricErrors, after.Counter)}
		case before.Tainted && !after.Tainted:
			ev = node.Event{Type: corev1.EventTypeNormal, Reason: reasonFabricErrorsCleared, Message: fmt.Sprintf(
				"%s: %d link errors in the last %s, below the threshold %d: taint %s removed", name, after.Errors, cfg.Window, cfg.Threshold, topology.TaintFabricErrors)}
		default:
			continue
		}
		if len(events) == maxFabricEvents {
			dropped++
			continue
		}
		events = append(events, ev)
	}
	if dropped > 0 {
		events = append(events, node.Event{Type: corev1.EventTypeWarning, Reason: reasonFabricErrors,
			Message: fmt.Sprintf("fabric-errors taints of %d more devices changed (see the node's ResourceSlices)", dropped)})
	}
	f.health = next
	return events
}

// apply returns inv with every device's fabricErrors attribute (0 for a
// device without readable counters) and the fabric-errors taint of the
// tainted ones; inv itself is not changed.
func (f *fabricHealth) apply(inv *devices.Inventory) (*devices.Inventory, int) {
	out := *inv
	out.GPUs = slices.Clone(inv.GPUs)
	out.NICs = slices.Clone(inv.NICs)
	tainted := 0
	mark := func(name string, errs **int64, taints *[]resourceapi.DeviceTaint) {
		h := f.health[name]
		n := h.Errors
		*errs = &n
		if h.Tainted {
			*taints = append(slices.Clone(*taints), resourceapi.DeviceTaint{
				Key: topology.TaintFabricErrors, Value: taintValue(h.Counter), Effect: resourceapi.DeviceTaintEffectNoSchedule,
			})
			tainted++
		}
	}
	for i := range out.GPUs {
		mark(out.GPUs[i].Name, &out.GPUs[i].FabricErrors, &out.GPUs[i].Taints)
	}
	for i := range out.NICs {
		mark(out.NICs[i].Name, &out.NICs[i].FabricErrors, &out.NICs[i].Taints)
	}
	return &out, tainted
}

// taintValue is a counter name as a taint value (counter names are label
// values already; "errors" when none is named).
func taintValue(counter string) string {
	if counter == "" || strings.ContainsAny(counter, " /") {
		return "errors"
	}
	return counter
}
