package scheduler

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpufabric/gpufabric/pkg/gang/commit"
	"github.com/gpufabric/gpufabric/pkg/gang/evict"
)

// Refusal reasons of the gangs_refused_total and pending_gangs metrics.
const (
	ReasonUnschedulable  = "unschedulable"
	ReasonSchedulerError = "scheduler-error"
	ReasonConflict       = "conflict"
	ReasonCommitError    = "commit-error"
	// ReasonUnsupported: a member uses a pod feature the engine does not
	// model; the message names the field.
	ReasonUnsupported = "unsupported"
	// reasonNotReady: the gang waits for members or claims (pending_gangs).
	reasonNotReady = "waiting-for-members"
)

// Results of attempt_duration_seconds.
const (
	resultPlaced        = "placed"
	resultUnschedulable = "unschedulable"
	resultNotReady      = "not-ready"
	resultConflict      = "conflict"
	resultError         = "error"
)

// Metrics of the scheduler. Create with NewMetrics; all methods accept a nil
// receiver (no metrics). Every labelled series an alert may need exists
// from the start, at zero. The commit and evict rooms' metrics are their
// own (commit.Metrics, evict.Metrics), registered here with the others.
type Metrics struct {
	placement prometheus.Histogram
	attempts  *prometheus.HistogramVec
	placed    prometheus.Counter
	refused   *prometheus.CounterVec
	freeGPUs  *prometheus.GaugeVec
	assumed   prometheus.Gauge
	doubles   *prometheus.CounterVec
	preempt   *evict.Metrics
	commit    *commit.Metrics

	mu sync.Mutex
	// state reads the current term's queue and pending gangs at scrape.
	state func() (queue map[string]int, pending map[string]int)
}

func opts(name, help string) prometheus.Opts {
	return prometheus.Opts{Namespace: "gpufabric", Subsystem: "scheduler", Name: name, Help: help}
}

func histogram(name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
	o := opts(name, help)
	return prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: o.Namespace, Subsystem: o.Subsystem, Name: o.Name, Help: o.Help, Buckets: buckets}, labels)
}

func plainHistogram(name, help string, buckets []float64) prometheus.Histogram {
	o := opts(name, help)
	return prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: o.Namespace, Subsystem: o.Subsystem, Name: o.Name, Help: o.Help, Buckets: buckets})
}

// NewMetrics creates the metrics and registers them with reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	fast := prometheus.ExponentialBuckets(0.001, 2, 14) // 1 ms … 8 s
	m := &Metrics{
		placement: plainHistogram("placement_duration_seconds", "Time to build a snapshot and place one gang.", fast),
		attempts:  histogram("attempt_duration_seconds", "Time of one scheduling attempt of a gang (snapshot, placement, commit), by result.", fast, "result"),
		placed:    prometheus.NewCounter(prometheus.CounterOpts(opts("gangs_placed_total", "Gangs placed and committed."))),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts(opts("gangs_refused_total",
			"Scheduling attempts that did not place a gang, by reason.")), []string{"reason"}),
		freeGPUs: prometheus.NewGaugeVec(prometheus.GaugeOpts(opts("free_gpus",
			"GPUs per NVLink domain that no claim has allocated (committed or assumed).")), []string{"domain"}),
		assumed: prometheus.NewGauge(prometheus.GaugeOpts(opts("assumed_gangs",
			"Committed gangs whose writes the scheduler's informers do not show yet."))),
		doubles: prometheus.NewCounterVec(prometheus.CounterOpts(opts("double_allocations_repaired_total",
			"Claims that lost a device allocated twice (by another scheduler), by action: evicted (their pods) or released (the claim); held: holds made for claims whose devices another scheduler forgot (hold.go).")), []string{"action"}),
	}
	for _, r := range []string{ReasonUnschedulable, ReasonSchedulerError, ReasonConflict, ReasonCommitError, ReasonUnsupported} {
		m.refused.WithLabelValues(r)
	}
	for _, a := range []string{"evicted", "released", "held"} {
		m.doubles.WithLabelValues(a)
	}
	for _, r := range []string{resultPlaced, resultUnschedulable, resultNotReady, resultConflict, resultError} {
		m.attempts.WithLabelValues(r)
	}
	m.preempt = evict.NewMetrics(fast)
	m.commit = commit.NewMetrics()
	collectors := []prometheus.Collector{m.placement, m.attempts, m.placed, m.refused, m.freeGPUs,
		m.assumed, m.doubles, &stateCollector{m: m}}
	collectors = append(collectors, m.preempt.Collectors()...)
	collectors = append(collectors, m.commit.Collectors()...)
	for _, c := range collectors {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// stateCollector reports the queue and the pending gangs at scrape time.
type stateCollector struct{ m *Metrics }

var (
	queueDesc = prometheus.NewDesc("gpufabric_scheduler_queue_gangs",
		"Gangs in the scheduling queue, by state: active (to be tried), backoff (after a failed attempt), parked (unschedulable, waiting for a change), waiting (not ready).",
		[]string{"state"}, nil)
	pendingDesc = prometheus.NewDesc("gpufabric_scheduler_pending_gangs",
		"Gangs whose last attempt did not place them, by reason.", []string{"reason"}, nil)
)

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- queueDesc
	ch <- pendingDesc
}

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	c.m.mu.Lock()
	state := c.m.state
	c.m.mu.Unlock()
	queue, pending := map[string]int{}, map[string]int{}
	if state != nil {
		queue, pending = state()
	}
	for _, s := range []string{"active", "backoff", "parked", "waiting"} {
		ch <- prometheus.MustNewConstMetric(queueDesc, prometheus.GaugeValue, float64(queue[s]), s)
	}
	for _, r := range []string{ReasonUnschedulable, reasonNotReady, ReasonUnsupported, ReasonSchedulerError, ReasonCommitError} {
		ch <- prometheus.MustNewConstMetric(pendingDesc, prometheus.GaugeValue, float64(pending[r]), r)
	}
}

// commitMetrics are the commit room's metrics, nil without metrics.
func (m *Metrics) commitMetrics() *commit.Metrics {
	if m == nil {
		return nil
	}
	return m.commit
}

// evictMetrics are the evict room's metrics, nil without metrics.
func (m *Metrics) evictMetrics() *evict.Metrics {
	if m == nil {
		return nil
	}
	return m.preempt
}

// attach makes the metrics report a term's queue and pending gangs.
func (m *Metrics) attach(state func() (map[string]int, map[string]int)) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.state = state
}

func (m *Metrics) observePlacement(seconds float64) {
	if m != nil {
		m.placement.Observe(seconds)
	}
}

func (m *Metrics) observeAttempt(result string, seconds float64) {
	if m != nil && result != "" {
		m.attempts.WithLabelValues(result).Observe(seconds)
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

func (m *Metrics) setAssumed(n int) {
	if m != nil {
		m.assumed.Set(float64(n))
	}
}

// DoubleAllocation counts one action of the double-allocation guard
// (pkg/gang/guard): "evicted", "released" or "held".
func (m *Metrics) DoubleAllocation(action string) {
	if m != nil {
		m.doubles.WithLabelValues(action).Inc()
	}
}

// pendingSet remembers why each gang's last attempt did not place it.
// Safe for concurrent use.
type pendingSet struct {
	mu sync.Mutex
	m  map[string]string
}

func (p *pendingSet) set(key, reason string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.m == nil {
		p.m = map[string]string{}
	}
	p.m[key] = reason
}

func (p *pendingSet) clear(key string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.m, key)
}

func (p *pendingSet) counts() map[string]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[string]int{}
	for _, r := range p.m {
		out[r]++
	}
	return out
}
