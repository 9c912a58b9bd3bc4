package scheduler

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Refusal reasons of the gangs_refused_total metric.
const (
	ReasonUnschedulable  = "unschedulable"
	ReasonSchedulerError = "scheduler-error"
	ReasonConflict       = "conflict"
	ReasonCommitError    = "commit-error"
)

// Metrics of the scheduler. Create with NewMetrics; all methods accept a nil
// receiver (no metrics).
type Metrics struct {
	placement prometheus.Histogram
	commit    prometheus.Histogram
	placed    prometheus.Counter
	refused   *prometheus.CounterVec
	freeGPUs  *prometheus.GaugeVec
}

// NewMetrics creates the metrics and registers them with reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		placement: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "gpufabric", Subsystem: "scheduler", Name: "placement_duration_seconds",
			Help:    "Time to build a snapshot and place one gang.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 14),
		}),
		commit: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "gpufabric", Subsystem: "scheduler", Name: "commit_duration_seconds",
			Help:    "Time to write one gang's decision to the API.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 12),
		}),
		placed: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "gpufabric", Subsystem: "scheduler", Name: "gangs_placed_total",
			Help: "Gangs placed and committed.",
		}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "gpufabric", Subsystem: "scheduler", Name: "gangs_refused_total",
			Help: "Scheduling attempts that did not place a gang, by reason.",
		}, []string{"reason"}),
		freeGPUs: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "gpufabric", Subsystem: "scheduler", Name: "free_gpus",
			Help: "GPUs per NVLink domain that no claim has allocated (committed or assumed).",
		}, []string{"domain"}),
	}
	for _, c := range []prometheus.Collector{m.placement, m.commit, m.placed, m.refused, m.freeGPUs} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m *Metrics) observePlacement(seconds float64) {
	if m != nil {
		m.placement.Observe(seconds)
	}
}

func (m *Metrics) observeCommit(seconds float64) {
	if m != nil {
		m.commit.Observe(seconds)
	}
}

func (m *Metrics) gangPlaced() {
	if m != nil {
		m.placed.Inc()
	}
}

func (m *Metrics) gangRefused(reason string) {
	if m != nil {
		m.refused.WithLabelValues(reason).Inc()
	}
}

// setFreeGPUs replaces the per-domain gauges.
func (m *Metrics) setFreeGPUs(free map[string]int) {
	if m == nil {
		return
	}
	m.freeGPUs.Reset()
	for d, n := range free {
		m.freeGPUs.WithLabelValues(d).Set(float64(n))
	}
}
