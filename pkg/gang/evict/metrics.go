package evict

import "github.com/prometheus/client_golang/prometheus"

// Results of preemptions_total.
const (
	preemptPlanned = "planned"
	preemptNoPlan  = "no_plan"
	preemptRefused = "eviction_refused"
	preemptExpired = "expired"
)

// Metrics of preemption and reservations; the loop registers Collectors
// with the rest of gpufabric-scheduler's metrics. All methods accept a nil
// receiver (no metrics). Every labelled series an alert may need exists
// from the start, at zero.
type Metrics struct {
	attempts     *prometheus.CounterVec
	victims      *prometheus.CounterVec
	evaluation   prometheus.Histogram
	nominations  prometheus.Gauge
	reservations prometheus.Gauge
}

func opts(name, help string) prometheus.Opts {
	return prometheus.Opts{Namespace: "gpufabric", Subsystem: "scheduler", Name: name, Help: help}
}

// NewMetrics creates the evict room's metrics (not registered); buckets
// are the evaluation histogram's.
func NewMetrics(buckets []float64) *Metrics {
	o := opts("preemption_evaluation_duration_seconds", "Time to choose the victims of one preemption.")
	m := &Metrics{
		attempts: prometheus.NewCounterVec(prometheus.CounterOpts(opts("preemptions_total",
			"Preemption evaluations and their outcome: planned (victims being evicted), no_plan, eviction_refused (a PodDisruptionBudget refused an eviction), expired (the gang was not placed in time).")), []string{"result"}),
		victims: prometheus.NewCounterVec(prometheus.CounterOpts(opts("preemption_victims_total",
			"Workloads evicted by preemption, by unit: group (a PodGroup with disruptionMode All, or a CompositePodGroup's subtree) or pod.")), []string{"unit"}),
		evaluation: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: o.Namespace, Subsystem: o.Subsystem, Name: o.Name, Help: o.Help, Buckets: buckets}),
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

// Collectors are the metrics to register.
func (m *Metrics) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.attempts, m.victims, m.evaluation, m.nominations, m.reservations}
}

func (m *Metrics) preemption(result string, seconds float64) {
	if m != nil {
		m.attempts.WithLabelValues(result).Inc()
		if seconds >= 0 {
			m.evaluation.Observe(seconds)
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
	m.victims.WithLabelValues(unit).Inc()
}

func (m *Metrics) setNominations(n int) {
	if m != nil {
		m.nominations.Set(float64(n))
	}
}

func (m *Metrics) setReservations(n int) {
	if m != nil {
		m.reservations.Set(float64(n))
	}
}
