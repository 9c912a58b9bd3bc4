package clientmetrics

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2/ktesting"
)

// TestRegister: once registered, a named workqueue, a REST request and a
// leader election show up on the registry under client-go's names; a
// standby's Lease series starts at 0; a second Register fails.
func TestRegister(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	reg := prometheus.NewRegistry()
	if err := Register(reg, Options{Leases: []string{"standby-lease"}}); err != nil {
		t.Fatal(err)
	}
	if err := Register(prometheus.NewRegistry(), Options{}); !errors.Is(err, ErrRegistered) {
		t.Errorf("second Register: %v, want ErrRegistered", err)
	}

	q := workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "test-queue"})
	defer q.ShutDown()
	q.Add("a")
	q.Add("b")
	q.AddRateLimited("c") // after the limiter's first delay (5 ms)

	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"kind":"NodeList","apiVersion":"v1","items":[]}`))
	}))
	defer srv.Close()
	client, err := kubernetes.NewForConfig(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}

	leadOnce(ctx, t, "test-lease")

	want := map[string]string{
		"workqueue_depth":                            `workqueue_depth{name="test-queue"} 3`,
		"workqueue_adds_total":                       `workqueue_adds_total{name="test-queue"} 3`,
		"leader_election_master_status":              `leader_election_master_status{name="standby-lease"} 0`,
		"rest_client_requests_total":                 `rest_client_requests_total{code="200",host="` + strings.TrimPrefix(srv.URL, "http://") + `",method="GET"} 1`,
		"workqueue_retries_total":                    `workqueue_retries_total{name="test-queue"} 1`,
		"rest_client_request_duration_seconds_count": `rest_client_request_duration_seconds_count{host="` + strings.TrimPrefix(srv.URL, "http://") + `",verb="GET"} 1`,
	}
	var lines []string
	err = wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		out, err := text(reg)
		if err != nil {
			return false, err
		}
		lines = strings.Split(string(out), "\n")
		for _, w := range want {
			if !contains(lines, w) {
				return false, nil
			}
		}
		return contains(lines, `leader_election_master_status{name="test-lease"} 1`), nil
	})
	if err != nil {
		t.Errorf("metrics %v; want %v and test-lease leading:\n%s", err, want, strings.Join(lines, "\n"))
	}
}

// leadOnce runs a leader election on a fake client until it leads.
func leadOnce(ctx context.Context, t *testing.T, name string) {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: "ns", Name: name},
		Client:     fake.NewClientset().CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: "me"},
	}
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock: lock, LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: time.Second, Name: name,
		Callbacks: leaderelection.LeaderCallbacks{OnStartedLeading: func(context.Context) {}, OnStoppedLeading: func() {}},
	})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { le.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) { return le.IsLeader(), nil }); err != nil {
		t.Fatalf("never led: %v", err)
	}
}

// text is everything reg holds in the text exposition format.
func text(reg *prometheus.Registry) ([]byte, error) {
	families, err := reg.Gather()
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	for _, f := range families {
		if _, err := expfmt.MetricFamilyToText(&b, f); err != nil {
			return nil, err
		}
	}
	return b.Bytes(), nil
}

func contains(lines []string, want string) bool {
	for _, l := range lines {
		if l == want {
			return true
		}
	}
	return false
}
