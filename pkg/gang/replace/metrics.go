package replace

import "github.com/prometheus/client_golang/prometheus"

// Metrics of replacements; the loop registers Collectors with the rest
// of gpufabric-scheduler's metrics. A nil *Metrics records nothing.
type Metrics struct {
	seconds *prometheus.HistogramVec
}

// NewMetrics creates the replace room's metrics (not registered). Every
// trigger and outcome series exists from the start.
func NewMetrics() *Metrics {
	m := &Metrics{seconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: "gpufabric", Subsystem: "scheduler", Name: "member_replacement_seconds",
		Help: "Time from a gang member's loss (its trigger) to its replacement: placed in place, the gang restarted and placed again, or the PodGroup failed.",
		// 1 s … 68 min.
		Buckets: prometheus.ExponentialBuckets(1, 2, 13),
	}, []string{"trigger", "outcome"})}
	for _, t := range Triggers {
		for _, o := range []string{OutcomeInPlace, OutcomeRestarted, OutcomeFailed} {
			m.seconds.WithLabelValues(string(t), o)
		}
	}
	return m
}

// Collectors are the metrics to register.
func (m *Metrics) Collectors() []prometheus.Collector {
	if m == nil {
		return nil
	}
	return []prometheus.Collector{m.seconds}
}

func (m *Metrics) observe(t Trigger, outcome string, seconds float64) {
	if m != nil {
		m.seconds.WithLabelValues(string(t), outcome).Observe(max(seconds, 0))
	}
}
