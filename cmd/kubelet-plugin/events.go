package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"github.com/gpufabric/gpufabric/pkg/claims/node"
	"github.com/gpufabric/gpufabric/pkg/devices"
)

// Node event reasons of GPU health.
const (
	reasonGPUEvent           = "GPUHealthEvent"
	reasonGPUEventsUnwatched = "GPUEventsUnwatched"
	reasonMIGExcluded        = "MIGGPUExcluded"
	reasonDriverFilesMissing = "DriverFilesUnavailable"
)

// pluginMetrics are the process's own metrics (the driver has its own).
type pluginMetrics struct {
	gpuEvents *prometheus.CounterVec
	// eventToPublish is the time from a GPU event to its taint handed to
	// the slice controller (which writes it at once).
	eventToPublish prometheus.Histogram
	// watcherRestarts counts restarts of the GPU event watcher.
	watcherRestarts prometheus.Counter
	// fabricTainted is how many devices carry the fabric-errors taint.
	fabricTainted prometheus.Gauge
}

func newPluginMetrics(reg prometheus.Registerer) (*pluginMetrics, error) {
	m := &pluginMetrics{
		gpuEvents: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gpufabric_kubelet_plugin_gpu_events_total",
			Help: "GPU events (Xid, ECC, lost GPU) by kind and by whether they changed a taint.",
		}, []string{"kind", "tainted"}),
		eventToPublish: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "gpufabric_kubelet_plugin_event_taint_seconds",
			Help:    "Time from a GPU event to the publication of its device taint.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 14),
		}),
		watcherRestarts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "gpufabric_kubelet_plugin_event_watcher_restarts_total",
			Help: "Restarts of the GPU event watcher after it died.",
		}),
		fabricTainted: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "gpufabric_kubelet_plugin_fabric_tainted_devices",
			Help: "Devices tainted gpufabric.dev/fabric-errors: link errors in the window at or past --fabric-error-threshold.",
		}),
	}
	for _, k := range []devices.EventKind{devices.EventXID, devices.EventDoubleBitECC, devices.EventSingleBitECC, devices.EventGPULost} {
		for _, tainted := range []string{"true", "false"} {
			m.gpuEvents.WithLabelValues(kindLabel(k), tainted) // every series from the start, at zero
		}
	}
	for _, c := range []prometheus.Collector{m.gpuEvents, m.eventToPublish, m.watcherRestarts, m.fabricTainted} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register metrics: %w", err)
		}
	}
	return m, nil
}

// kindLabel is an event kind as the kind label of gpu_events_total spells
// it: snake_case, as every label value of the metrics ("ecc-double-bit" →
// "ecc_double_bit").
func kindLabel(k devices.EventKind) string { return strings.ReplaceAll(string(k), "-", "_") }

// onEvent records a GPU event's taint and, when it changed something,
// publishes at once and tells the operator with a Node event.
func (p *plugin) onEvent(ctx context.Context, ev devices.Event) {
	logger := klog.FromContext(ctx).WithValues("kind", ev.Kind, "xid", ev.XID, "uuid", ev.UUID)
	uuids := make([]string, 0, len(p.inv.GPUs))
	for _, g := range p.inv.GPUs {
		uuids = append(uuids, g.UUID)
	}
	changed, err := p.events.Record(ev, uuids)
	p.metrics.gpuEvents.WithLabelValues(kindLabel(ev.Kind), fmt.Sprint(changed)).Inc()
	if err != nil {
		logger.Error(err, "Recording a GPU event failed")
		return
	}
	if !changed {
		logger.V(2).Info("GPU event changes no taint")
		return
	}
	if err := p.publish(ctx); err != nil {
		logger.Error(err, "Publishing resources failed")
		return
	}
	p.metrics.eventToPublish.Observe(time.Since(ev.Time).Seconds())
	taint, _ := p.events.Policy().Taint(ev)
	msg := fmt.Sprintf("%s %s: taint %s=%s:%s", gpuName(p.inv, ev.UUID), ev.Kind, taint.Key, taint.Value, taint.Effect)
	if ev.Kind == devices.EventXID {
		msg = fmt.Sprintf("%s xid %d: taint %s=%s:%s", gpuName(p.inv, ev.UUID), ev.XID, taint.Key, taint.Value, taint.Effect)
	}
	logger.Info("GPU tainted by an event", "taint", taint.Key, "effect", taint.Effect)
	p.recordEvent(ctx, node.Event{Type: corev1.EventTypeWarning, Reason: reasonGPUEvent, Message: msg})
}

// gpuName names a GPU for messages: "gpu-2 (GPU-…)", or "every GPU".
func gpuName(inv *devices.Inventory, uuid string) string {
	if uuid == "" {
		return "every GPU"
	}
	if g, ok := inv.GPUByUUID(uuid); ok {
		return g.Name + " (" + uuid + ")"
	}
	return uuid
}
