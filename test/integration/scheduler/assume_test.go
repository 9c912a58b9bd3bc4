package scheduler

import (
	"context"
	"fmt"
	"github.com/gpufabric/gpufabric/pkg/gang/gate"
	"github.com/gpufabric/gpufabric/test/integration/itest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/gpufabric/gpufabric/pkg/gang/scheduler"
	"github.com/gpufabric/gpufabric/test/integration/framework"
)

// TestSchedulerAssumeCache: a committed gang is assumed only until the
// informers show its writes, even when they change again before the
// informers caught up. Right after its commit (before the scheduler's
// informers can show it), one gang's claim is deallocated and its pod
// deleted: its GPUs are free again for the next gang, which then fits its
// best domain exactly. Another gang's node is deleted right after its
// commit: later gangs are still placed.
func TestSchedulerAssumeCache(t *testing.T) {
	cp := framework.StartT(t, framework.Options{ControllerManager: true})
	ctx := t.Context()
	admin := cp.AdminClient(t)
	itest.FabricCluster(t, admin, []string{"a"}, 2, 4)
	itest.FabricCluster(t, admin, []string{"b"}, 4, 4)
	for _, ns := range []string{"freed", "next", "doomed", "after"} {
		itest.GangNamespace(t, admin, ns, 4)
	}
	hook := func(step gate.Step, object string) error {
		if step != gate.StepDone {
			return nil
		}
		switch {
		case strings.HasPrefix(object, "freed/"):
			releaseGang(t, admin, "freed")
		case strings.HasPrefix(object, "doomed/"):
			p, err := admin.CoreV1().Pods("doomed").Get(ctx, "g-0", metav1.GetOptions{})
			itest.Must(t, "get doomed pod", err)
			itest.Must(t, "delete its node", admin.CoreV1().Nodes().Delete(ctx, p.Spec.NodeName, metav1.DeleteOptions{}))
		}
		return nil
	}
	reg := prometheus.NewRegistry()
	metrics, err := scheduler.NewMetrics(reg)
	itest.Must(t, "metrics", err)
	startScheduler(t, schedulerClient(t, cp, "gpufabric-scheduler"), scheduler.Config{DomainChannels: 4, CommitHook: hook, Metrics: metrics, MetricsInterval: 200 * time.Millisecond})

	itest.CreateGang(t, admin, "freed", "g", 1, 1)
	itest.Poll(t, "freed gang committed and released", 60*time.Second, func(ctx context.Context) error {
		pods, err := admin.CoreV1().Pods("freed").List(ctx, metav1.ListOptions{})
		if err == nil && len(pods.Items) > 0 {
			err = fmt.Errorf("%d pods left", len(pods.Items))
		}
		return err
	})
	// Both nodes of domain a are free again: the 2 × 4-GPU gang fits it
	// exactly (best fit), which it would not if the freed GPUs stayed assumed.
	itest.CreateGang(t, admin, "next", "g", 2, 2)
	itest.Poll(t, "next gang placed in domain a", 60*time.Second, gangIn(admin, "next", 2, "dom-a"))

	itest.CreateGang(t, admin, "doomed", "g", 1, 1)
	itest.Poll(t, "doomed gang's node deleted", 60*time.Second, func(ctx context.Context) error {
		p, err := admin.CoreV1().Pods("doomed").Get(ctx, "g-0", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil // evicted: its node is gone (a member lost, replaced in place)
		}
		if err != nil {
			return err
		}
		if _, err := admin.CoreV1().Nodes().Get(ctx, p.Spec.NodeName, metav1.GetOptions{}); err == nil {
			return fmt.Errorf("node %s still there", p.Spec.NodeName)
		}
		return nil
	})
	itest.CreateGang(t, admin, "after", "g", 2, 2)
	itest.Poll(t, "a gang placed after a node of an assumed gang was deleted", 60*time.Second, gangIn(admin, "after", 2, "dom-b"))
	itest.Poll(t, "nothing assumed any more", 30*time.Second, func(context.Context) error {
		if n := schedMetricValue(t, reg, "gpufabric_scheduler_assumed_gangs", ""); n != 0 {
			return fmt.Errorf("%v gangs assumed", n)
		}
		return nil
	})
}

// releaseGang deallocates every claim of a namespace and deletes its pods
// at once, as kube-controller-manager and a user would.
func releaseGang(t *testing.T, c kubernetes.Interface, ns string) {
	ctx := t.Context()
	claims, err := c.ResourceV1().ResourceClaims(ns).List(ctx, metav1.ListOptions{})
	itest.Must(t, "list claims", err)
	for _, cl := range claims.Items {
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			cur, err := c.ResourceV1().ResourceClaims(ns).Get(ctx, cl.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			cur.Status.Allocation, cur.Status.ReservedFor = nil, nil
			_, err = c.ResourceV1().ResourceClaims(ns).UpdateStatus(ctx, cur, metav1.UpdateOptions{})
			return err
		})
		itest.Must(t, "deallocate claim", err)
	}
	pods, err := c.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	itest.Must(t, "list pods", err)
	for _, p := range pods.Items {
		itest.Must(t, "delete pod", c.CoreV1().Pods(ns).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}))
	}
}

// gangIn waits for n bound pods of ns, all in domain, and their commit done.
func gangIn(c kubernetes.Interface, ns string, n int, domain string) func(context.Context) error {
	return func(ctx context.Context) error {
		st, err := itest.ReadGang(ctx, c, ns)
		if err != nil {
			return err
		}
		if st.Bound() != n || len(st.Records) > 0 {
			return fmt.Errorf("%d of %d bound, records %v", st.Bound(), n, st.Records)
		}
		for _, p := range st.Pods {
			if d := itest.DomainOf(p.Spec.NodeName); d != domain {
				return fmt.Errorf("pod %s in %s, want %s", p.Name, d, domain)
			}
		}
		return nil
	}
}
