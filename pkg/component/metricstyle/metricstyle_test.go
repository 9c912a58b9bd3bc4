package metricstyle

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
)

// TestCheck: kebab-case, upper-case and empty values are reported once
// each, sorted; exempt labels (by name, by metric and name, or one value)
// are not.
func TestCheck(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	results := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "results_total", Help: "h"}, []string{"result", "domain"})
	leases := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "leader_election_master_status", Help: "h"}, []string{"name"})
	queues := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "workqueue_depth", Help: "h"}, []string{"name"})
	reg.MustRegister(results, leases, queues)
	results.WithLabelValues("rolled_back", "nvl-0.A").Inc()
	results.WithLabelValues("rolled-back", "nvl-1").Inc()
	results.WithLabelValues("Placed", "x").Inc()
	results.WithLabelValues("", "y").Inc()
	leases.WithLabelValues("gpufabric-scheduler").Set(1)
	queues.WithLabelValues("gangs").Set(1)
	queues.WithLabelValues("double-allocations").Set(1)
	queues.WithLabelValues("DynamicClientCertificate").Set(1)
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		`results_total{result=""}`,
		`results_total{result="Placed"}`,
		`results_total{result="rolled-back"}`,
		`workqueue_depth{name="double-allocations"}`,
	}
	if diff := cmp.Diff(want, Check(fams, Exempt)); diff != "" {
		t.Errorf("Check (-want +got):\n%s", diff)
	}
	if got := Check(fams, nil); len(got) != 8 {
		t.Errorf("Check without exemptions: %d values %v, want 8 (with the domains, the Lease and client-go's queue)", len(got), got)
	}
}
