package composite

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/gpufabric/gpufabric/pkg/gang/gate"
	"github.com/gpufabric/gpufabric/pkg/gang/scheduler"
	"github.com/gpufabric/gpufabric/test/integration/framework"
	"github.com/gpufabric/gpufabric/test/integration/itest"
)

// errKilled is what the commit hook returns to simulate a crash.
var errKilled = errors.New("killed by test")

// treeWrites is the commit of a tree of two leaves of one pod each: the
// record, each pod's claim (finalizer, status), the two bindings, the two
// leaves' conditions, the record cleared.
const treeWrites = 1 + 2*2 + 2 + 2 + 1

// TestCompositeCrashRecovery kills the scheduler before write k of a
// tree's commit (its two leaves commit as one transaction), for every k,
// and starts a new one: right after its recovery the tree is bound whole
// or not at all, never one leaf without the other; in the end both are
// bound and no device is allocated twice.
func TestCompositeCrashRecovery(t *testing.T) {
	var nodes []node
	for i := range 6 { // room for all the trees (2 GPUs each) at once
		nodes = append(nodes, node{name: fmt.Sprintf("n-%d", i), domain: "n", rack: "r0"})
	}
	cp, admin := startPlane(t, nodes)
	for k := 1; k <= treeWrites; k++ {
		t.Run(fmt.Sprintf("killed-before-write-%d", k), func(t *testing.T) { crashTree(t, cp, admin, k) })
	}
}

func crashTree(t *testing.T, cp *framework.ControlPlane, admin kubernetes.Interface, k int) {
	ns := fmt.Sprintf("crash-%d", k)
	itest.GangNamespace(t, admin, ns, 1)
	tr := tree{ns: ns, name: "t", key: rackLabel, min: 2, leaves: []leaf{
		{name: "x", key: keyNVL, min: 1, pods: 1}, {name: "y", min: 1, pods: 1},
	}}
	tr.create(t, admin)
	var mu sync.Mutex
	var steps []string
	hook := func(step gate.Step, object string) error {
		if !strings.HasPrefix(object, ns+"/") {
			return nil
		}
		mu.Lock()
		defer mu.Unlock()
		if len(steps) == 0 && step != gate.StepRecord {
			return nil // a status write before the claims exist
		}
		if len(steps) == k-1 {
			return errKilled
		}
		steps = append(steps, string(step)+" "+object)
		return nil
	}
	first := startScheduler(t, cp, fmt.Sprintf("sched-%d-a", k), func(c *scheduler.Config) { c.CommitHook = hook })
	select {
	case <-first.done:
	case <-time.After(60 * time.Second):
		t.Fatalf("the first scheduler did not die; writes so far %v", steps)
	}
	if !errors.Is(first.err, gate.ErrAborted) {
		t.Fatalf("the first scheduler ended with %v, want ErrAborted", first.err)
	}
	t.Logf("killed after %d writes: %v", len(steps), steps)
	recovered := make(chan error, 1)
	startScheduler(t, cp, fmt.Sprintf("sched-%d-b", k), func(c *scheduler.Config) {
		c.OnRecovered = func() { recovered <- wholeOrNothing(context.Background(), admin, ns) }
	})
	select {
	case err := <-recovered:
		if err != nil {
			t.Fatalf("right after recovery: %v", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the second scheduler did not recover")
	}
	waitBound(t, admin, ns, 2)
	if dup, err := itest.DevicesAllocatedTwice(t.Context(), admin); err != nil || len(dup) > 0 {
		t.Errorf("devices allocated twice: %v %v", dup, err)
	}
}

// wholeOrNothing: both pods of the tree bound, or neither.
func wholeOrNothing(ctx context.Context, admin kubernetes.Interface, ns string) error {
	pods, err := admin.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	bound := 0
	for _, p := range pods.Items {
		if p.Spec.NodeName != "" {
			bound++
		}
	}
	if bound != 0 && bound != len(pods.Items) {
		return fmt.Errorf("%d of %d pods of the tree bound", bound, len(pods.Items))
	}
	return nil
}
