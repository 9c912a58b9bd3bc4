package scheduler

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/api/meta"

	"github.com/gpufabric/gpufabric/pkg/gang/metrics"
	"github.com/gpufabric/gpufabric/pkg/gang/vocab"
)

// Metrics of the scheduler (pkg/gang/metrics).
type Metrics = metrics.Metrics

// MetricsOptions choose optional metrics.
type MetricsOptions = metrics.Options

// NewMetrics creates the metrics with the default options and registers
// them with reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) { return metrics.New(reg) }

// NewMetricsWith creates the metrics chosen by o and registers them with reg.
func NewMetricsWith(reg prometheus.Registerer, o MetricsOptions) (*Metrics, error) {
	return metrics.NewWith(reg, o)
}

// Refusal reasons of the gangs_refused_total and pending_gangs metrics.
const (
	ReasonUnschedulable  = metrics.ReasonUnschedulable
	ReasonSchedulerError = metrics.ReasonSchedulerError
	ReasonConflict       = metrics.ReasonConflict
	ReasonCommitError    = metrics.ReasonCommitError
	ReasonUnsupported    = metrics.ReasonUnsupported
	ReasonTimedOut       = metrics.ReasonTimedOut
	reasonNotReady       = metrics.ReasonNotReady
)

// Results of attempt_duration_seconds.
const (
	resultPlaced        = metrics.ResultPlaced
	resultUnschedulable = metrics.ResultUnschedulable
	resultNotReady      = metrics.ResultNotReady
	resultConflict      = metrics.ResultConflict
	resultError         = metrics.ResultError
)

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

// gangWaitSince says when a gang whose commit just succeeded began to
// wait, and whether this commit is its placement: gang_wait_seconds is
// observed once per placement. A PodGroup whose InitiallyScheduled
// condition was already True when the attempt read it was placed before:
// the commit places late members (minCount below the gang's size) and is
// not observed. A restarted gang has the condition False again and
// observes again. The wait starts at the PodGroup's creationTimestamp, the
// pod's for a gang of one, or later, when the gang's last scheduling gate
// went later (the caller takes the later of this and ungate.Times').
func gangWaitSince(a *attempt) (time.Time, bool) {
	switch {
	case a.pg != nil:
		if meta.IsStatusConditionTrue(a.pg.Status.Conditions, vocab.ConditionInitiallyScheduled) {
			return time.Time{}, false
		}
		return a.pg.CreationTimestamp.Time, true
	case a.pod != nil:
		return a.pod.CreationTimestamp.Time, true
	}
	return time.Time{}, false
}
