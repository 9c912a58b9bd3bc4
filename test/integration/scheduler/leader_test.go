package scheduler

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"

	"github.com/gpufabric/gpufabric/pkg/gang/scheduler"
	"github.com/gpufabric/gpufabric/test/integration/framework"
	"github.com/gpufabric/gpufabric/test/integration/itest"
)

// TestSchedulerLeaderElection runs two replicas with the shipped RBAC rules
// and a Lease: the leader schedules; when it stops, the other takes over
// and schedules the next pod.
func TestSchedulerLeaderElection(t *testing.T) {
	cp := framework.StartT(t, framework.Options{ControllerManager: true})
	admin := cp.AdminClient(t)
	itest.FabricCluster(t, admin, []string{"a"}, 2, 4)
	const ns = "leader"
	itest.GangNamespace(t, admin, ns, 1)
	client := schedulerClient(t, cp, "gpufabric-scheduler")

	type replica struct {
		cancel context.CancelFunc
		done   chan error
	}
	replicas := map[string]*replica{}
	for _, id := range []string{"r1", "r2"} {
		logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.Verbosity(1)))
		ctx, cancel := context.WithCancel(klog.NewContext(t.Context(), klog.LoggerWithName(logger, id)))
		r := &replica{cancel: cancel, done: make(chan error, 1)}
		replicas[id] = r
		go func() {
			r.done <- scheduler.RunWithLeaderElection(ctx,
				scheduler.Config{Client: client, RecordNamespace: itest.RecordNamespace, DomainChannels: 2, InitialBackoff: 200 * time.Millisecond},
				scheduler.LeaderElection{Namespace: itest.RecordNamespace, Identity: id, LeaseDuration: 3 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 200 * time.Millisecond})
		}()
		t.Cleanup(func() { cancel(); <-r.done })
	}
	holder := func(ctx context.Context) (string, error) {
		l, err := admin.CoordinationV1().Leases(itest.RecordNamespace).Get(ctx, "gpufabric-scheduler", metav1.GetOptions{})
		if err != nil {
			return "", err
		}
		if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == "" {
			return "", errors.New("no holder")
		}
		return *l.Spec.HolderIdentity, nil
	}
	bound := func(name string) func(context.Context) error {
		return func(ctx context.Context) error {
			p, err := admin.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
			if err == nil && p.Spec.NodeName == "" {
				err = fmt.Errorf("pod %s unbound", name)
			}
			return err
		}
	}

	itest.CreateSinglePod(t, admin, ns, "p1")
	itest.Poll(t, "p1 bound by the first leader", 30*time.Second, bound("p1"))
	first, err := holder(t.Context())
	itest.Must(t, "lease holder", err)

	r := replicas[first]
	r.cancel()
	if err := <-r.done; err != nil {
		t.Errorf("leader %s ended with %v", first, err)
	}
	r.done <- nil // for the cleanup
	var second string
	itest.Poll(t, "the other replica leads", 20*time.Second, func(ctx context.Context) error {
		h, err := holder(ctx)
		if err == nil && h == first {
			err = fmt.Errorf("still held by %s", h)
		}
		second = h
		return err
	})
	itest.CreateSinglePod(t, admin, ns, "p2")
	itest.Poll(t, "p2 bound by "+second, 30*time.Second, bound("p2"))
}
