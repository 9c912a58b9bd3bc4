package scheduler

import (
	"context"
	"errors"
	"fmt"
	"github.com/gpufabric/gpufabric/pkg/gang/gate"
	"github.com/gpufabric/gpufabric/test/integration/itest"
	"strings"
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
// allocated twice. The writes of a phase run in parallel (default
// CommitParallelism), so "before write k" is "the hook fails at the k-th
// write started": writes already started complete, none starts after it,
// and the k writes that ran are checked for phase order.
func TestSchedulerCrashRecovery(t *testing.T) {
	cp := framework.StartT(t, framework.Options{ControllerManager: true})
	admin := cp.AdminClient(t)
	itest.FabricCluster(t, admin, []string{"a", "b"}, 8, 4)
	client := schedulerClient(t, cp, "gpufabric-scheduler")
	const pods = 2
	// N: record, shared claim (finalizer, status), per-pod claims
	// (finalizer, status) each, bindings, condition, clear record.
	const writes = 1 + 2 + 2*pods + pods + 1 + 1
	for k := 0; k <= writes; k++ {
		t.Run(fmt.Sprintf("gang-killed-before-write-%d", k), func(t *testing.T) {
			crashAndRecover(t, cp, client, crashCase{ns: fmt.Sprintf("crash-%d", k), k: k, pods: pods, claims: pods + 1, first: gate.StepRecord,
				create: func(ns string) { itest.CreateGang(t, admin, ns, "g", int32(pods), pods) }})
		})
	}
	// A pod without a PodGroup: finalizer, claim status, binding.
	for k := 0; k <= 3; k++ {
		t.Run(fmt.Sprintf("single-pod-killed-before-write-%d", k), func(t *testing.T) {
			crashAndRecover(t, cp, client, crashCase{ns: fmt.Sprintf("single-%d", k), k: k, pods: 1, claims: 1, first: gate.StepClaimFinalizer,
				create: func(ns string) { itest.CreateSinglePod(t, admin, ns, "solo") }})
		})
	}
}

// crashCase is one crash position of one kind of gang.
type crashCase struct {
	ns           string
	k            int // writes before the kill
	pods, claims int
	first        gate.Step // the commit's first write
	create       func(ns string)
}

func crashAndRecover(t *testing.T, cp *framework.ControlPlane, client kubernetes.Interface, tc crashCase) {
	t.Helper()
	admin := cp.AdminClient(t)
	ns, k, pods := tc.ns, tc.k, tc.pods
	itest.GangNamespace(t, admin, ns, 2)
	tc.create(ns)
	itest.Poll(t, "claims created", 30*time.Second, func(ctx context.Context) error {
		st, err := itest.ReadGang(ctx, admin, ns)
		if err != nil {
			return err
		}
		if len(st.Claims) != tc.claims {
			return fmt.Errorf("%d claims", len(st.Claims))
		}
		return nil
	})

	// First instance: dies before write k of this gang's commit.
	var mu sync.Mutex
	var steps []string
	hook := func(step gate.Step, object string) error {
		if !inNamespace(object, ns) {
			return nil
		}
		mu.Lock()
		defer mu.Unlock()
		if len(steps) == 0 && step != tc.first {
			return nil // e.g. an Unschedulable condition before the pools exist
		}
		if len(steps) == k {
			return errKilled
		}
		steps = append(steps, string(step)+" "+object)
		return nil
	}
	first := startScheduler(t, client, scheduler.Config{DomainChannels: 8, CommitHook: hook})
	select {
	case <-first.done:
	case <-time.After(60 * time.Second):
		t.Fatalf("first scheduler did not die; steps so far %v", steps)
	}
	if !errors.Is(first.err, gate.ErrAborted) {
		t.Fatalf("first scheduler ended with %v, want ErrAborted", first.err)
	}
	t.Logf("killed after %d writes: %v", len(steps), steps)
	if len(steps) != k {
		t.Fatalf("killed after %d writes, want %d", len(steps), k)
	}
	if err := phaseOrder(steps, tc.first == gate.StepRecord); err != nil {
		t.Fatalf("writes out of phase order: %v", err)
	}

	// Second instance: right after recovery, all or nothing.
	recovered := make(chan error, 1)
	startScheduler(t, client, scheduler.Config{DomainChannels: 8, OnRecovered: func() {
		st, err := itest.ReadGang(context.Background(), admin, ns)
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
	var st *itest.GangState
	itest.Poll(t, "gang bound by the second instance", 60*time.Second, func(ctx context.Context) error {
		var err error
		if st, err = itest.ReadGang(ctx, admin, ns); err != nil {
			return err
		}
		if st.Bound() != pods {
			return fmt.Errorf("%d of %d bound", st.Bound(), pods)
		}
		return st.Consistent(true)
	})
	if len(st.Groups) > 0 {
		checkPlacedGang(t, admin, st, "g", pods)
	} else if dup, err := itest.DevicesAllocatedTwice(t.Context(), admin); err != nil || len(dup) > 0 {
		t.Errorf("devices allocated twice: %v (%v)", dup, err)
	}
}

// allOrNothing: every pod bound and the commit's state consistent, or no pod
// bound and no claim of the namespace allocated.
func allOrNothing(st *itest.GangState, pods int) error {
	switch st.Bound() {
	case pods:
		return st.Consistent(true)
	case 0:
		if n := st.Allocated(); n > 0 {
			return fmt.Errorf("no pod bound, but %d claims allocated", n)
		}
		return st.Consistent(true)
	default:
		return fmt.Errorf("%d of %d pods bound", st.Bound(), pods)
	}
}

// phaseOrder checks the writes a commit started (as "step object", in the
// order they passed the hook; the writes of one phase run in parallel):
// every write of a phase comes after every write of the previous one, and
// with a PodGroup the first claim written (the shared claim, steps 1 and 2)
// is not written again by the per-pod phase.
func phaseOrder(steps []string, withGroup bool) error {
	rank := map[gate.Step]int{
		gate.StepRecord: 0, gate.StepClaimFinalizer: 1, gate.StepClaimStatus: 1,
		gate.StepBind: 2, gate.StepCondition: 3, gate.StepClearRecord: 4, gate.StepDone: 5,
	}
	last := -1
	for i, s := range steps {
		step, _, _ := strings.Cut(s, " ")
		r, ok := rank[gate.Step(step)]
		if !ok || r < last {
			return fmt.Errorf("write %d %q after a later phase: %q", i, s, steps)
		}
		last = r
	}
	if !withGroup || len(steps) < 3 {
		return nil
	}
	_, shared, _ := strings.Cut(steps[1], " ")
	for i, s := range steps[2:] {
		_, obj, _ := strings.Cut(s, " ")
		if obj == shared && i > 0 {
			return fmt.Errorf("shared claim %s written again as write %d: %q", shared, i+2, steps)
		}
	}
	return nil
}

func inNamespace(object, ns string) bool {
	return len(object) > len(ns) && object[:len(ns)+1] == ns+"/"
}
