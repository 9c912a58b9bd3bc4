package integration

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/gpufabric/gpufabric/pkg/gang/scheduler"
	"github.com/gpufabric/gpufabric/test/integration/framework"
)

// errKilled is what the commit hook returns to simulate a crash.
var errKilled = errors.New("killed by test")

// TestSchedulerCrashRecovery kills the scheduler before write k of a gang's
// commit, for every k from 0 (nothing written) to N (all written), and
// starts a new instance on the same apiserver. Right after its recovery
// the gang is bound entirely or not at all, with no allocation that is not
// reserved for a live consumer; in the end the gang is bound and no device is
// allocated twice.
func TestSchedulerCrashRecovery(t *testing.T) {
	cp := framework.StartT(t, framework.Options{ControllerManager: true})
	admin := cp.AdminClient(t)
	fabricCluster(t, admin, []string{"a", "b"}, 8, 4)
	client := schedulerClient(t, cp, "gpufabric-scheduler")
	const pods = 2
	// N: intent, shared claim (finalizer, status), per-pod claims
	// (finalizer, status) each, bindings, condition, clear intent.
	const writes = 1 + 2 + 2*pods + pods + 1 + 1
	for k := 0; k <= writes; k++ {
		t.Run(fmt.Sprintf("killed-before-write-%d", k), func(t *testing.T) {
			crashAndRecover(t, cp, client, k, pods)
		})
	}
}

func crashAndRecover(t *testing.T, cp *framework.ControlPlane, client kubernetes.Interface, k, pods int) {
	t.Helper()
	admin := cp.AdminClient(t)
	ns := fmt.Sprintf("crash-%d", k)
	gangNamespace(t, admin, ns, 2)
	createGang(t, admin, ns, "g", int32(pods), pods)
	poll(t, "claims created", 30*time.Second, func(ctx context.Context) error {
		st, err := readGang(ctx, admin, ns)
		if err != nil {
			return err
		}
		if len(st.claims) != pods+1 {
			return fmt.Errorf("%d claims", len(st.claims))
		}
		return nil
	})

	// First instance: dies before write k of this gang's commit.
	var mu sync.Mutex
	var steps []string
	hook := func(step scheduler.Step, object string) error {
		if !inNamespace(object, ns) {
			return nil
		}
		mu.Lock()
		defer mu.Unlock()
		if len(steps) == 0 && step != scheduler.StepIntent {
			return nil // e.g. an Unschedulable condition before the pools exist
		}
		if len(steps) == k {
			return errKilled
		}
		steps = append(steps, string(step))
		return nil
	}
	first := startScheduler(t, client, scheduler.Config{DomainChannels: 8, CommitHook: hook})
	select {
	case <-first.done:
	case <-time.After(60 * time.Second):
		t.Fatalf("first scheduler did not die; steps so far %v", steps)
	}
	if !errors.Is(first.err, scheduler.ErrAborted) {
		t.Fatalf("first scheduler ended with %v, want ErrAborted", first.err)
	}
	t.Logf("killed after %d writes: %v", len(steps), steps)

	// Second instance: right after recovery, all or nothing.
	recovered := make(chan error, 1)
	startScheduler(t, client, scheduler.Config{DomainChannels: 8, OnRecovered: func() {
		st, err := readGang(context.Background(), admin, ns)
		if err == nil {
			err = allOrNothing(st, pods)
		}
		recovered <- err
	}})
	select {
	case err := <-recovered:
		if err != nil {
			t.Fatalf("after recovery: %v", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("second scheduler did not recover")
	}
	var st *gangState
	poll(t, "gang bound by the second instance", 60*time.Second, func(ctx context.Context) error {
		var err error
		if st, err = readGang(ctx, admin, ns); err != nil {
			return err
		}
		if st.bound() != pods {
			return fmt.Errorf("%d of %d bound", st.bound(), pods)
		}
		return st.consistent(true)
	})
	checkPlacedGang(t, admin, st, "g", pods)
}

// allOrNothing: every pod bound and the commit's state consistent, or no pod
// bound and no claim of the namespace allocated.
func allOrNothing(st *gangState, pods int) error {
	switch st.bound() {
	case pods:
		return st.consistent(true)
	case 0:
		if n := st.allocated(); n > 0 {
			return fmt.Errorf("no pod bound, but %d claims allocated", n)
		}
		return st.consistent(true)
	default:
		return fmt.Errorf("%d of %d pods bound", st.bound(), pods)
	}
}

func inNamespace(object, ns string) bool {
	return len(object) > len(ns) && object[:len(ns)+1] == ns+"/"
}
