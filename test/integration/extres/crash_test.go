package extres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/gpufabric/gpufabric/pkg/gang/gate"
	"github.com/gpufabric/gpufabric/pkg/gang/scheduler"
	"github.com/gpufabric/gpufabric/pkg/topology"
	"github.com/gpufabric/gpufabric/test/integration/framework"
	"github.com/gpufabric/gpufabric/test/integration/itest"
)

var errKilled = errors.New("killed by the test")

// TestExtendedCrashRecovery: gangs whose pods ask nvidia.com/gpu (their
// special claims made before the commit) are committed by a scheduler
// killed before its k-th write, for every k: a PodGroup of 2 pods (record,
// 2 claims × finalizer and status, 2 pod statuses, 2 bindings, condition,
// clear record) and a pod alone (finalizer, claim status, pod status,
// binding). The writes came in phase order, every pod status after every
// claim write and before every binding; right after a second instance's
// recovery the gang is bound whole or not at all, with no allocation
// reserved for an unbound pod; in the end it is bound, and each pod's
// status names its special claim, allocated on its node.
func TestExtendedCrashRecovery(t *testing.T) {
	cp := framework.StartT(t, framework.Options{})
	admin := cp.AdminClient(t)
	// Room for every case: each keeps its 2-4 GPUs.
	itest.FabricCluster(t, admin, []string{"a", "b", "c", "d"}, 4, 8)
	class, err := admin.ResourceV1().DeviceClasses().Get(t.Context(), topology.GPUDeviceClass, metav1.GetOptions{})
	itest.Must(t, "get GPU class", err)
	class.Spec.ExtendedResourceName = ptr.To(string(gpuResource))
	_, err = admin.ResourceV1().DeviceClasses().Update(t.Context(), class, metav1.UpdateOptions{})
	itest.Must(t, "name nvidia.com/gpu in the GPU class", err)
	client := schedulerClient(t, cp)
	group := map[gate.Step]int{gate.StepRecord: 1, gate.StepClaimFinalizer: 2, gate.StepClaimStatus: 2, gate.StepPodStatus: 2,
		gate.StepBind: 2, gate.StepCondition: 1, gate.StepClearRecord: 1}
	single := map[gate.Step]int{gate.StepClaimFinalizer: 1, gate.StepClaimStatus: 1, gate.StepPodStatus: 1, gate.StepBind: 1}
	for k := 0; k <= total(group); k++ {
		t.Run(fmt.Sprintf("gang-killed-before-write-%d", k), func(t *testing.T) {
			crash(t, admin, client, k, 2, gate.StepRecord, group)
		})
	}
	for k := 0; k <= total(single); k++ {
		t.Run(fmt.Sprintf("single-pod-killed-before-write-%d", k), func(t *testing.T) {
			crash(t, admin, client, k, 1, gate.StepClaimFinalizer, single)
		})
	}
}

func total(writes map[gate.Step]int) int {
	n := 0
	for _, c := range writes {
		n += c
	}
	return n
}

// crash runs one case: pods pods (a PodGroup when more than one), the
// first scheduler killed before write k of the commit (first: its first
// step; all: the commit's writes, by step).
func crash(t *testing.T, admin, client kubernetes.Interface, k, pods int, first gate.Step, all map[gate.Step]int) {
	ctx := t.Context()
	ns := fmt.Sprintf("crash-%d-%d", pods, k)
	itest.GangNamespace(t, admin, ns, 1)
	var names []string
	for i := range pods {
		spec := podSpec(gpuResource, 2)
		if pods > 1 {
			spec.SchedulingGroup = &corev1.PodSchedulingGroup{PodGroupName: ptr.To("g")}
		}
		names = append(names, fmt.Sprintf("p-%d", i))
		_, err := admin.CoreV1().Pods(ns).Create(ctx, bare(ns, names[i], spec), metav1.CreateOptions{})
		itest.Must(t, "create pod", err)
	}
	if pods > 1 {
		pg := &schedulingv1beta1.PodGroup{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "g"}, Spec: schedulingv1beta1.PodGroupSpec{
			SchedulingPolicy: schedulingv1beta1.PodGroupSchedulingPolicy{Gang: &schedulingv1beta1.GangSchedulingPolicy{MinCount: int32(pods)}},
		}}
		_, err := admin.SchedulingV1beta1().PodGroups(ns).Create(ctx, pg, metav1.CreateOptions{})
		itest.Must(t, "create PodGroup", err)
	}

	var mu sync.Mutex
	var steps []string
	hook := func(step gate.Step, object string) error {
		if !strings.HasPrefix(object, ns+"/") && object != ns+"/g" {
			return nil
		}
		mu.Lock()
		defer mu.Unlock()
		if len(steps) == 0 && step != first {
			return nil // the special claims made before the commit
		}
		if len(steps) == k {
			return errKilled
		}
		steps = append(steps, string(step))
		return nil
	}
	killed := startScheduler(t, client, scheduler.Config{CommitHook: hook})
	select {
	case <-killed.done:
	case <-time.After(60 * time.Second):
		t.Fatalf("first scheduler not killed; steps so far %v", steps)
	}
	if !errors.Is(killed.err, gate.ErrAborted) || len(steps) != k {
		t.Fatalf("first scheduler ended with %v after %d writes %v, want ErrAborted after %d", killed.err, len(steps), steps, k)
	}
	if err := phaseOrder(steps); err != nil {
		t.Fatalf("writes out of phase order: %v", err)
	}
	if k == total(all) {
		got := map[gate.Step]int{}
		for _, st := range steps {
			got[gate.Step(st)]++
		}
		if fmt.Sprint(got) != fmt.Sprint(all) {
			t.Fatalf("the whole commit wrote %v, want %v", got, all)
		}
	}

	recovered := make(chan error, 1)
	startScheduler(t, client, scheduler.Config{OnRecovered: func() {
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
	itest.Poll(t, "bound, each with its special claim", 60*time.Second, func(ctx context.Context) error {
		var errs []error
		for _, name := range names {
			p, err := admin.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
			if err == nil {
				_, err = checkSpecialClaim(ctx, admin, p, gpuResource, topology.GPUDeviceClass, 2)
			}
			errs = append(errs, err)
		}
		st, err := itest.ReadGang(ctx, admin, ns)
		if err == nil {
			err = st.Consistent(true)
		}
		return errors.Join(append(errs, err)...)
	})
	if dup, err := itest.DevicesAllocatedTwice(ctx, admin); err != nil || len(dup) > 0 {
		t.Errorf("devices allocated twice: %v (%v)", dup, err)
	}
}

// allOrNothing: every pod bound and consistent, or none bound and no claim
// of the namespace allocated.
func allOrNothing(st *itest.GangState, pods int) error {
	switch st.Bound() {
	case pods:
		return st.Consistent(true)
	case 0:
		if n := st.Allocated(); n > 0 {
			return fmt.Errorf("no pod bound, but %d claims allocated", n)
		}
		return st.Consistent(true)
	}
	return fmt.Errorf("%d of %d pods bound", st.Bound(), pods)
}

// phaseOrder checks that the writes (steps in the order they passed the
// hook) never go back to an earlier phase: record, claims, pod statuses,
// bindings, condition, clear record, done.
func phaseOrder(steps []string) error {
	rank := map[gate.Step]int{
		gate.StepRecord: 0, gate.StepClaimFinalizer: 1, gate.StepClaimStatus: 1, gate.StepPodStatus: 2,
		gate.StepBind: 3, gate.StepCondition: 4, gate.StepClearRecord: 5, gate.StepDone: 6,
	}
	last := -1
	for i, s := range steps {
		r, ok := rank[gate.Step(s)]
		if !ok || r < last {
			return fmt.Errorf("write %d %q after a later phase: %q", i, s, steps)
		}
		last = r
	}
	return nil
}
