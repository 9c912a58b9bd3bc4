package metrics

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	"k8s.io/apimachinery/pkg/api/meta"

	"github.com/gpufabric/gpufabric/pkg/gang/commit"
	"github.com/gpufabric/gpufabric/pkg/gang/evict"
	"github.com/gpufabric/gpufabric/pkg/gang/replace"
	"github.com/gpufabric/gpufabric/pkg/gang/ungate"
	"github.com/gpufabric/gpufabric/pkg/gang/vocab"
)

// Refusal reasons of the gangs_refused_total and pending_gangs metrics.
const (
	ReasonUnschedulable  = "unschedulable"
	ReasonSchedulerError = "scheduler_error"
	ReasonConflict       = "conflict"
	ReasonCommitError    = "commit_error"
	// ReasonUnsupported: a member uses a pod feature the engine does not
	// model; the message names the field.
	ReasonUnsupported = "unsupported"
	// ReasonTimedOut: the attempt spent its placement budget, or the
	// gang's claims ran out of the allocator's time (vocab.ReasonTimedOut).
	ReasonTimedOut = "timed_out"
	// ReasonNotReady: the gang waits for members or claims (pending_gangs).
	ReasonNotReady = "waiting_for_members"
)

// Results of attempt_duration_seconds.
const (
	ResultPlaced        = "placed"
	ResultUnschedulable = "unschedulable"
	ResultNotReady      = "not_ready"
	ResultConflict      = "conflict"
	ResultError         = "error"
	// ResultAbandoned: gang_wait_seconds of a PodGroup deleted before it
	// was placed.
	ResultAbandoned = "abandoned"
)

// Metrics of the scheduler. Create with New; all methods accept a nil
// receiver (no metrics). Every labelled series an alert may need exists
// from the start, at zero. The commit and evict rooms' metrics are their
// own (commit.Metrics, evict.Metrics), registered here with the others.
type Metrics struct {
	placement prometheus.Histogram
	attempts  *prometheus.HistogramVec
	placed    prometheus.Counter
	refused   *prometheus.CounterVec
	// freeGPUs and largestFree are per level (bounded); domainFree is
	// per NVLink domain, nil unless Options.PerDomain.
	freeGPUs    *prometheus.GaugeVec
	largestFree *prometheus.GaugeVec
	domainFree  *prometheus.GaugeVec
	gangWait    *prometheus.HistogramVec
	assumed     prometheus.Gauge
	doubles     *prometheus.CounterVec
	preempt     *evict.Metrics
	replace     *replace.Metrics
	commit      *commit.Metrics

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

// levelNVLinkDomain is the level label of the free-GPU aggregates: the
// free map counts GPUs per NVLink domain.
const levelNVLinkDomain = "nvlink_domain"

// Options choose optional metrics.
type Options struct {
	// PerDomain exports domain_free_gpus{domain}: one series per NVLink
	// domain (one per node on HGX), off by default.
	PerDomain bool
}

// New creates the metrics with the default options and registers
// them with reg.
func New(reg prometheus.Registerer) (*Metrics, error) {
	return NewWith(reg, Options{})
}

// NewWith creates the metrics chosen by o and registers them with reg.
func NewWith(reg prometheus.Registerer, o Options) (*Metrics, error) {
	fast := prometheus.ExponentialBuckets(0.001, 2, 14) // 1 ms … 8 s
	m := &Metrics{
		placement: plainHistogram("placement_duration_seconds", "Time to build a snapshot and place one gang.", fast),
		attempts:  histogram("attempt_duration_seconds", "Time of one scheduling attempt of a gang (snapshot, placement, commit), by result.", fast, "result"),
		placed:    prometheus.NewCounter(prometheus.CounterOpts(opts("gangs_placed_total", "Gangs placed and committed."))),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts(opts("gangs_refused_total",
			"Scheduling attempts that did not place a gang, by reason.")), []string{"reason"}),
		freeGPUs: prometheus.NewGaugeVec(prometheus.GaugeOpts(opts("free_gpus",
			"GPUs that no claim has allocated (committed or assumed), summed over the domains of a level.")), []string{"level"}),
		largestFree: prometheus.NewGaugeVec(prometheus.GaugeOpts(opts("largest_free_domain_gpus",
			"Free GPUs of the domain of a level with the most free: the largest gang of one domain that could fit.")), []string{"level"}),
		gangWait: histogram("gang_wait_seconds",
			"Time from a gang's creation to its minCount members bound (observed once per placement), by result.",
			prometheus.ExponentialBuckets(1, 2, 16), "result"), // 1 s … 9 h
		assumed: prometheus.NewGauge(prometheus.GaugeOpts(opts("assumed_gangs",
			"Committed gangs whose writes the scheduler's informers do not show yet."))),
		doubles: prometheus.NewCounterVec(prometheus.CounterOpts(opts("double_allocations_repaired_total",
			"Claims that lost a device allocated twice (by another scheduler), by action: evicted (their pods) or released (the claim); held: holds made for claims whose devices another scheduler forgot (hold.go).")), []string{"action"}),
	}
	for _, r := range []string{ReasonUnschedulable, ReasonSchedulerError, ReasonConflict, ReasonCommitError, ReasonUnsupported, ReasonTimedOut} {
		m.refused.WithLabelValues(r)
	}
	for _, a := range []string{"evicted", "released", "held"} {
		m.doubles.WithLabelValues(a)
	}
	for _, r := range []string{ResultPlaced, ResultUnschedulable, ResultNotReady, ResultConflict, ResultError} {
		m.attempts.WithLabelValues(r)
	}
	m.gangWait.WithLabelValues(ResultPlaced)
	m.gangWait.WithLabelValues(ResultAbandoned)
	m.preempt = evict.NewMetrics(fast)
	m.replace = replace.NewMetrics()
	m.commit = commit.NewMetrics()
	collectors := []prometheus.Collector{m.placement, m.attempts, m.placed, m.refused, m.freeGPUs,
		m.largestFree, m.gangWait, m.assumed, m.doubles, &stateCollector{m: m}}
	if o.PerDomain {
		m.domainFree = prometheus.NewGaugeVec(prometheus.GaugeOpts(opts("domain_free_gpus",
			"GPUs per NVLink domain that no claim has allocated (committed or assumed).")), []string{"domain"})
		collectors = append(collectors, m.domainFree)
	}
	collectors = append(collectors, m.preempt.Collectors()...)
	collectors = append(collectors, m.commit.Collectors()...)
	collectors = append(collectors, m.replace.Collectors()...)
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
	for _, r := range []string{ReasonUnschedulable, ReasonNotReady, ReasonUnsupported, ReasonSchedulerError, ReasonCommitError, ReasonTimedOut} {
		ch <- prometheus.MustNewConstMetric(pendingDesc, prometheus.GaugeValue, float64(pending[r]), r)
	}
}

// CommitMetrics are the commit room's metrics, nil without metrics.
func (m *Metrics) CommitMetrics() *commit.Metrics {
	if m == nil {
		return nil
	}
	return m.commit
}

// EvictMetrics are the evict room's metrics, nil without metrics.
func (m *Metrics) EvictMetrics() *evict.Metrics {
	if m == nil {
		return nil
	}
	return m.preempt
}

// ReplaceMetrics are the replace room's metrics, nil without metrics.
func (m *Metrics) ReplaceMetrics() *replace.Metrics {
	if m == nil {
		return nil
	}
	return m.replace
}

// Attach makes the metrics report a term's queue and pending gangs.
func (m *Metrics) Attach(state func() (map[string]int, map[string]int)) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.state = state
}

func (m *Metrics) ObservePlacement(seconds float64) {
	if m != nil {
		m.placement.Observe(seconds)
	}
}

func (m *Metrics) ObserveAttempt(result string, seconds float64) {
	if m != nil && result != "" {
		m.attempts.WithLabelValues(result).Observe(seconds)
	}
}

func (m *Metrics) GangPlaced() {
	if m != nil {
		m.placed.Inc()
	}
}

func (m *Metrics) GangRefused(reason string) {
	if m != nil {
		m.refused.WithLabelValues(reason).Inc()
	}
}

// SetFreeGPUs sets the per-level aggregates of free (GPUs per NVLink
// domain) and, when enabled, replaces the per-domain gauges.
func (m *Metrics) SetFreeGPUs(free map[string]int) {
	if m == nil {
		return
	}
	total, largest := 0, 0
	for _, n := range free {
		total += n
		largest = max(largest, n)
	}
	m.freeGPUs.WithLabelValues(levelNVLinkDomain).Set(float64(total))
	m.largestFree.WithLabelValues(levelNVLinkDomain).Set(float64(largest))
	if m.domainFree == nil {
		return
	}
	m.domainFree.Reset()
	for d, n := range free {
		m.domainFree.WithLabelValues(d).Set(float64(n))
	}
}

// ObserveGangWait observes gang_wait_seconds for a gang whose minCount
// members are bound now.
func (m *Metrics) ObserveGangWait(result string, seconds float64) {
	if m != nil {
		m.gangWait.WithLabelValues(result).Observe(seconds)
	}
}

func (m *Metrics) SetAssumed(n int) {
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

// GangAbandoned observes gang_wait_seconds{result="abandoned"} for a
// PodGroup deleted (seen at now) before it was placed: its InitiallyScheduled
// condition is not True. The wait starts at the later of its creation and
// ungated (when its last gate went, ungate.Times; zero: none seen). A
// PodGroup deleted while no term watched is not observed.
func (m *Metrics) GangAbandoned(pg *schedulingv1beta1.PodGroup, ungated, now time.Time) {
	if m == nil || meta.IsStatusConditionTrue(pg.Status.Conditions, vocab.ConditionInitiallyScheduled) {
		return
	}
	m.gangWait.WithLabelValues(ResultAbandoned).Observe(now.Sub(ungate.Later(pg.CreationTimestamp.Time, ungated)).Seconds())
}
