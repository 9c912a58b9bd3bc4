package metrics

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpufabric/gpufabric/pkg/component/metricstyle"
	"github.com/gpufabric/gpufabric/pkg/gang/vocab"
)

// podGroupAt builds a PodGroup created at created, with the
// InitiallyScheduled condition in status placed ("" for none).
func podGroupAt(created time.Time, placed metav1.ConditionStatus) *schedulingv1beta1.PodGroup {
	pg := &schedulingv1beta1.PodGroup{ObjectMeta: metav1.ObjectMeta{Name: "pg", Namespace: "ns", CreationTimestamp: metav1.NewTime(created)}}
	if placed != "" {
		pg.Status.Conditions = []metav1.Condition{{Type: vocab.ConditionInitiallyScheduled, Status: placed, Reason: vocab.ReasonScheduled}}
	}
	return pg
}

// TestFreeGPUMetrics: by default free GPUs are exported per level (total
// and largest domain), bounded whatever the number of domains; the
// per-domain series only with Options.PerDomain.
func TestFreeGPUMetrics(t *testing.T) {
	free := map[string]int{"nvl0": 6, "nvl1": 0, "nvl2": 3}
	const aggregates = `
# HELP gpufabric_scheduler_free_gpus GPUs that no claim has allocated (committed or assumed), summed over the domains of a level.
# TYPE gpufabric_scheduler_free_gpus gauge
gpufabric_scheduler_free_gpus{level="nvlink_domain"} 9
# HELP gpufabric_scheduler_largest_free_domain_gpus Free GPUs of the domain of a level with the most free: the largest gang of one domain that could fit.
# TYPE gpufabric_scheduler_largest_free_domain_gpus gauge
gpufabric_scheduler_largest_free_domain_gpus{level="nvlink_domain"} 6
`
	const perDomain = `
# HELP gpufabric_scheduler_domain_free_gpus GPUs per NVLink domain that no claim has allocated (committed or assumed).
# TYPE gpufabric_scheduler_domain_free_gpus gauge
gpufabric_scheduler_domain_free_gpus{domain="nvl0"} 6
gpufabric_scheduler_domain_free_gpus{domain="nvl1"} 0
gpufabric_scheduler_domain_free_gpus{domain="nvl2"} 3
`
	names := []string{"gpufabric_scheduler_free_gpus", "gpufabric_scheduler_largest_free_domain_gpus", "gpufabric_scheduler_domain_free_gpus"}
	for _, tc := range []struct {
		name string
		o    Options
		want string
	}{
		{"default", Options{}, aggregates},
		{"per domain", Options{PerDomain: true}, perDomain + aggregates},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reg := prometheus.NewPedanticRegistry()
			m, err := NewWith(reg, tc.o)
			if err != nil {
				t.Fatal(err)
			}
			m.SetFreeGPUs(map[string]int{"gone": 8}) // replaced by the next refresh
			m.SetFreeGPUs(free)
			if err := testutil.GatherAndCompare(reg, strings.NewReader(tc.want), names...); err != nil {
				t.Error(err)
			}
		})
	}
}

// TestGangWaitObserved: observeGangWait adds one sample per call under
// its result; the placed and abandoned series exist from the start, at
// zero; a nil Metrics observes nothing. gangAbandoned observes a PodGroup
// deleted before it was placed (or after a restart reset its condition),
// not one that was placed.
func TestGangWaitObserved(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	m, err := New(reg)
	if err != nil {
		t.Fatal(err)
	}
	samples := func() map[string]uint64 {
		fams, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]uint64{}
		for _, f := range fams {
			if f.GetName() != "gpufabric_scheduler_gang_wait_seconds" {
				continue
			}
			for _, s := range f.GetMetric() {
				out[s.GetLabel()[0].GetValue()] = s.GetHistogram().GetSampleCount()
			}
		}
		return out
	}
	if diff := cmp.Diff(map[string]uint64{ResultPlaced: 0, ResultAbandoned: 0}, samples()); diff != "" {
		t.Errorf("at start (-want +got):\n%s", diff)
	}
	m.ObserveGangWait(ResultPlaced, 90)
	(*Metrics)(nil).ObserveGangWait(ResultPlaced, 90)
	created := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, placed := range []metav1.ConditionStatus{"", metav1.ConditionTrue, metav1.ConditionFalse} {
		m.GangAbandoned(podGroupAt(created, placed), time.Time{}, created.Add(time.Minute))
	}
	(*Metrics)(nil).GangAbandoned(podGroupAt(created, ""), time.Time{}, created)
	if diff := cmp.Diff(map[string]uint64{ResultPlaced: 1, ResultAbandoned: 2}, samples()); diff != "" {
		t.Errorf("after the observations (-want +got):\n%s", diff)
	}
}

// TestMetricLabelValues: after every metric of the scheduler was
// exercised (each result, reason, phase, action and state, a free-GPU
// refresh with per-domain series), every label value is snake_case but
// the NVLink domain ids (metricstyle.Exempt).
func TestMetricLabelValues(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	m, err := NewWith(reg, Options{PerDomain: true})
	if err != nil {
		t.Fatal(err)
	}
	m.SetFreeGPUs(map[string]int{"nvl-0.rack-A": 4})
	for _, r := range []string{ResultPlaced, ResultUnschedulable, ResultNotReady, ResultConflict, ResultError} {
		m.ObserveAttempt(r, 1)
	}
	m.ObserveGangWait(ResultPlaced, 1)
	m.GangAbandoned(podGroupAt(time.Now(), ""), time.Time{}, time.Now())
	for _, r := range []string{ReasonUnschedulable, ReasonSchedulerError, ReasonConflict, ReasonCommitError, ReasonUnsupported} {
		m.GangRefused(r)
	}
	m.Attach(func() (map[string]int, map[string]int) {
		return map[string]int{"active": 1}, map[string]int{ReasonNotReady: 1, ReasonCommitError: 1}
	})
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	if bad := metricstyle.Check(families, metricstyle.Exempt); len(bad) > 0 {
		t.Errorf("label values not snake_case: %v", bad)
	}
	if len(families) < 15 {
		t.Errorf("%d metric families gathered, want the scheduler's, the commit room's and the evict room's", len(families))
	}
}

// TestGangAbandonedWaitsFromUngate: an abandoned gang's wait starts at the
// later of its creation and its last gate's removal.
func TestGangAbandonedWaitsFromUngate(t *testing.T) {
	created := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, tc := range []struct {
		name    string
		ungated time.Time
		want    float64
	}{
		{"never gated", time.Time{}, 60},
		{"ungated after creation", created.Add(50 * time.Second), 10},
		{"ungated before creation (clock skew)", created.Add(-time.Hour), 60},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reg := prometheus.NewPedanticRegistry()
			m, err := New(reg)
			if err != nil {
				t.Fatal(err)
			}
			m.GangAbandoned(podGroupAt(created, ""), tc.ungated, created.Add(time.Minute))
			h := &dto.Metric{}
			if err := m.gangWait.WithLabelValues(ResultAbandoned).(prometheus.Histogram).Write(h); err != nil {
				t.Fatal(err)
			}
			if got := h.GetHistogram().GetSampleSum(); got != tc.want {
				t.Errorf("wait %vs, want %vs", got, tc.want)
			}
		})
	}
}
