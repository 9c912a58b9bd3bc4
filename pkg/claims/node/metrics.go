package node

import (
	"fmt"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpufabric/gpufabric/pkg/claims/checkpoint"
	"github.com/gpufabric/gpufabric/pkg/topology"
)

const metricsNamespace = "gpufabric"
const metricsSubsystem = "kubelet_plugin"

// metrics are the driver's Prometheus metrics, registered with the
// registry given in Config (none: not exported).
type metrics struct {
	prepareSeconds   prometheus.Histogram
	unprepareSeconds prometheus.Histogram
	prepareErrors    *prometheus.CounterVec
	unprepareErrors  *prometheus.CounterVec
	preparedClaims   prometheus.Gauge
	preparedDevices  *prometheus.GaugeVec
	corruptions      prometheus.Counter
	recovered        *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	buckets := prometheus.ExponentialBuckets(0.0005, 2, 14) // 0.5 ms … 4 s
	opts := func(name, help string) prometheus.Opts {
		return prometheus.Opts{Namespace: metricsNamespace, Subsystem: metricsSubsystem, Name: name, Help: help}
	}
	hist := func(name, help string) prometheus.Histogram {
		o := opts(name, help)
		return prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: o.Namespace, Subsystem: o.Subsystem, Name: o.Name, Help: o.Help, Buckets: buckets,
		})
	}
	m := &metrics{
		prepareSeconds:   hist("prepare_duration_seconds", "Latency of PrepareResourceClaims calls."),
		unprepareSeconds: hist("unprepare_duration_seconds", "Latency of UnprepareResourceClaims calls."),
		prepareErrors: prometheus.NewCounterVec(prometheus.CounterOpts(opts("prepare_errors_total",
			"Claims that failed to prepare, by reason.")), []string{"reason"}),
		unprepareErrors: prometheus.NewCounterVec(prometheus.CounterOpts(opts("unprepare_errors_total",
			"Claims that failed to unprepare, by reason.")), []string{"reason"}),
		preparedClaims: prometheus.NewGauge(prometheus.GaugeOpts(opts("prepared_claims",
			"Claims prepared on this node."))),
		preparedDevices: prometheus.NewGaugeVec(prometheus.GaugeOpts(opts("prepared_devices",
			"Devices prepared on this node, by type.")), []string{"type"}),
		corruptions: prometheus.NewCounter(prometheus.CounterOpts(opts("checkpoint_corruptions_total",
			"Corrupted checkpoints moved aside and rebuilt."))),
		recovered: prometheus.NewCounterVec(prometheus.CounterOpts(opts("recovered_claims_total",
			"Claims redone or rolled back during recovery, by action.")), []string{"action"}),
	}
	// Every reason's series exists from the start, at zero (alerts on a
	// rate need the series before the first error).
	for _, r := range []string{"not_allocated", "no_devices", "not_on_node", "double_booked", "config", "imex", "unknown_device", "resolve", "cdi", "checkpoint", "other"} {
		m.prepareErrors.WithLabelValues(r)
	}
	if reg == nil {
		return m, nil
	}
	collectors := []prometheus.Collector{
		m.prepareSeconds, m.unprepareSeconds, m.prepareErrors, m.unprepareErrors,
		m.preparedClaims, m.preparedDevices, m.corruptions, m.recovered,
	}
	for i, c := range collectors {
		if err := reg.Register(c); err != nil {
			for _, done := range collectors[:i] {
				reg.Unregister(done)
			}
			return nil, fmt.Errorf("register metrics: %w", err)
		}
	}
	return m, nil
}

// observeState sets the prepared gauges from the checkpoint.
func (m *metrics) observeState(cp *checkpoint.Checkpoint) {
	counts := map[string]int{
		topology.DeviceTypeGPU: 0, topology.DeviceTypeNIC: 0, topology.DeviceTypeFabricDomain: 0,
	}
	for _, c := range cp.Claims {
		for _, d := range c.Devices {
			if t := deviceType(d); t != "" {
				counts[t]++
			}
		}
	}
	m.preparedClaims.Set(float64(len(cp.Claims)))
	for t, n := range counts {
		m.preparedDevices.WithLabelValues(typeLabel(t)).Set(float64(n))
	}
}

// typeLabel is a device type as the type label of prepared_devices
// spells it: snake_case, as every label value of the metrics
// ("fabric-domain" → "fabric_domain").
func typeLabel(deviceType string) string { return strings.ReplaceAll(deviceType, "-", "_") }
