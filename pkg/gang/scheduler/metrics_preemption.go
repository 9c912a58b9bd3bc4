package scheduler

import "github.com/prometheus/client_golang/prometheus"

// Results of preemptions_total.
const (
	preemptPlanned = "planned"
	preemptNoPlan  = "no-plan"
	preemptRefused = "eviction-refused"
	preemptExpired = "expired"
)

// preemptionMetrics are the metrics of preemption and reservations.
type preemptionMetrics struct {
	attempts     *prometheus.CounterVec
	victims      *prometheus.CounterVec
	evaluation   prometheus.Histogram
	nominations  prometheus.Gauge
	reservations prometheus.Gauge
}

func newPreemptionMetrics(buckets []float64) preemptionMetrics {
	m := preemptionMetrics{
		attempts: prometheus.NewCounterVec(prometheus.CounterOpts(opts("preemptions_total",
			"Preemption evaluations and their outcome: planned (victims being evicted), no-plan, eviction-refused (a PodDisruptionBudget refused an eviction), expired (the gang was not placed in time).")), []string{"result"}),
		victims: prometheus.NewCounterVec(prometheus.CounterOpts(opts("preemption_victims_total",
			"Workloads evicted by preemption, by unit: group (a PodGroup with disruptionMode All) or pod.")), []string{"unit"}),
		evaluation: plainHistogram("preemption_evaluation_duration_seconds", "Time to choose the victims of one preemption.", buckets),
		nominations: prometheus.NewGauge(prometheus.GaugeOpts(opts("nominations",
			"Gangs preempting now: their victims are going and nodes are held for them."))),
		reservations: prometheus.NewGauge(prometheus.GaugeOpts(opts("reservations",
			"Gangs past the starvation bound holding the domain closest to fitting them."))),
	}
	for _, r := range []string{preemptPlanned, preemptNoPlan, preemptRefused, preemptExpired} {
		m.attempts.WithLabelValues(r)
	}
	for _, u := range []string{"group", "pod"} {
		m.victims.WithLabelValues(u)
	}
	return m
}

func (p preemptionMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{p.attempts, p.victims, p.evaluation, p.nominations, p.reservations}
}

func (m *Metrics) preemption(result string, seconds float64) {
	if m != nil {
		m.preempt.attempts.WithLabelValues(result).Inc()
		if seconds >= 0 {
			m.preempt.evaluation.Observe(seconds)
		}
	}
}

func (m *Metrics) victim(group bool) {
	if m == nil {
		return
	}
	unit := "pod"
	if group {
		unit = "group"
	}
	m.preempt.victims.WithLabelValues(unit).Inc()
}

func (m *Metrics) setNominations(n int) {
	if m != nil {
		m.preempt.nominations.Set(float64(n))
	}
}

func (m *Metrics) setReservations(n int) {
	if m != nil {
		m.preempt.reservations.Set(float64(n))
	}
}
