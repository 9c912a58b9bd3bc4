package clientmetrics

import (
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/tools/leaderelection"
	clientmetrics "k8s.io/client-go/tools/metrics"
	"k8s.io/client-go/util/workqueue"
)

// registered makes a second Register fail: client-go would ignore it.
var registered atomic.Bool

// ErrRegistered is returned by a second Register in one process.
var ErrRegistered = errors.New("client-go metrics are already registered in this process")

// Options of Register.
type Options struct {
	// Leases are the leader-election Lease names whose
	// leader_election_master_status series start at 0, so that a replica
	// that never led reports it (an alert on "no replica leads" needs the
	// series of the standbys).
	Leases []string
}

// Register creates client-go's metrics on reg and hands them to client-go.
// Call it once, from main, before creating clients, workqueues or
// leader electors.
func Register(reg prometheus.Registerer, opts Options) error {
	if !registered.CompareAndSwap(false, true) {
		return ErrRegistered
	}
	wq := newWorkqueueMetrics()
	rest := newRESTMetrics()
	le := newLeaderMetrics()
	for _, c := range append(append(wq.collectors(), rest.collectors()...), le.collectors()...) {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("register client-go metrics: %w", err)
		}
	}
	for _, name := range opts.Leases {
		le.Off(name)
	}
	workqueue.SetProvider(wq)
	clientmetrics.Register(clientmetrics.RegisterOpts{
		RequestLatency:     rest.latency,
		RateLimiterLatency: rest.rateLimiter,
		RequestResult:      rest.results,
	})
	leaderelection.SetProvider(le)
	return nil
}
