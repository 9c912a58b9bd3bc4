package clientmetrics

import (
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/tools/leaderelection"
)

// leaderMetrics is client-go's leaderelection.MetricsProvider and its
// one LeaderMetric.
type leaderMetrics struct {
	status   *prometheus.GaugeVec
	slowpath *prometheus.CounterVec
}

var (
	_ leaderelection.MetricsProvider = (*leaderMetrics)(nil)
	_ leaderelection.LeaderMetric    = (*leaderMetrics)(nil)
)

func newLeaderMetrics() *leaderMetrics {
	return &leaderMetrics{
		status: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "leader_election_master_status",
			Help: "1 while this process leads (holds the Lease) name, else 0."}, []string{"name"}),
		slowpath: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "leader_election_slowpath_total",
			Help: "Lease renewals that fell back to the slow path (a read before the update), by name."}, []string{"name"}),
	}
}

func (m *leaderMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.status, m.slowpath}
}

func (m *leaderMetrics) NewLeaderMetric() leaderelection.LeaderMetric { return m }

func (m *leaderMetrics) On(name string)                { m.status.WithLabelValues(name).Set(1) }
func (m *leaderMetrics) Off(name string)               { m.status.WithLabelValues(name).Set(0) }
func (m *leaderMetrics) SlowpathExercised(name string) { m.slowpath.WithLabelValues(name).Inc() }
