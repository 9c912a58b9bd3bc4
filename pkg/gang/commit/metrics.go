package commit

import "github.com/prometheus/client_golang/prometheus"

// Results of the recoveries_total metric.
const (
	RecoveryFinished   = "finished"
	RecoveryRolledBack = "rolled_back"
	RecoveryRejected   = "rejected"
)

// Phases of commit_phase_duration_seconds.
const (
	phaseRecord       = "record"
	phaseSharedClaims = "shared_claims"
	phasePodClaims    = "pod_claims"
	phasePodStatus    = "pod_status"
	phaseBind         = "bind"
	phaseCondition    = "condition"
	phaseClearRecord  = "clear_record"
)

// Metrics of the commit room; the loop registers Collectors with the rest
// of gpufabric-scheduler's metrics. All methods accept a nil receiver (no
// metrics). Every labelled series an alert may need exists from the start,
// at zero.
type Metrics struct {
	commit    prometheus.Histogram
	phases    *prometheus.HistogramVec
	recovered *prometheus.CounterVec
}

func opts(name, help string) prometheus.Opts {
	return prometheus.Opts{Namespace: "gpufabric", Subsystem: "scheduler", Name: name, Help: help}
}

// NewMetrics creates the commit room's metrics (not registered).
func NewMetrics() *Metrics {
	o := opts("commit_duration_seconds", "Time to write one gang's decision to the API.")
	p := opts("commit_phase_duration_seconds", "Time of one phase of a commit (all its writes), by phase.")
	m := &Metrics{
		commit: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: o.Namespace, Subsystem: o.Subsystem, Name: o.Name, Help: o.Help,
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 12)}),
		phases: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: p.Namespace, Subsystem: p.Subsystem, Name: p.Name, Help: p.Help,
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 14)}, []string{"phase"}), // 1 ms … 8 s
		recovered: prometheus.NewCounterVec(prometheus.CounterOpts(opts("recoveries_total",
			"Half-done commits found by recovery, by result: finished, rolled_back, or rejected (an invalid commit record, not acted on).")), []string{"result"}),
	}
	for _, r := range []string{RecoveryFinished, RecoveryRolledBack, RecoveryRejected} {
		m.recovered.WithLabelValues(r)
	}
	for _, ph := range []string{phaseRecord, phaseSharedClaims, phasePodClaims, phasePodStatus, phaseBind, phaseCondition, phaseClearRecord} {
		m.phases.WithLabelValues(ph)
	}
	return m
}

// Collectors are the metrics to register.
func (m *Metrics) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.commit, m.phases, m.recovered}
}

func (m *Metrics) observeCommit(seconds float64) {
	if m != nil {
		m.commit.Observe(seconds)
	}
}

func (m *Metrics) observePhase(phase string, seconds float64) {
	if m != nil {
		m.phases.WithLabelValues(phase).Observe(seconds)
	}
}

func (m *Metrics) recovery(result string) {
	if m != nil {
		m.recovered.WithLabelValues(result).Inc()
	}
}
