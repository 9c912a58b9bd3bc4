package scheduler

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/gpufabric/gpufabric/pkg/gang/commit"
	"github.com/gpufabric/gpufabric/pkg/gang/gate"
	"github.com/gpufabric/gpufabric/pkg/gang/scheduler"
	"github.com/gpufabric/gpufabric/pkg/gang/vocab"
	"github.com/gpufabric/gpufabric/test/integration/framework"
	"github.com/gpufabric/gpufabric/test/integration/itest"
)

// largeGangPods is the size of TestSchedulerLargeGang's gang: 1,000 by
// default (make test), GPUFABRIC_LARGE_GANG_PODS in make soak (2,000).
func largeGangPods(t *testing.T) int {
	if v := os.Getenv("GPUFABRIC_LARGE_GANG_PODS"); v != "" {
		n, err := strconv.Atoi(v)
		itest.Must(t, "GPUFABRIC_LARGE_GANG_PODS", err)
		return n
	}
	return 1000
}

// TestSchedulerLargeGang: a gang whose commit record is larger than one
// object (by default 1,000 pods with two claims each and names near the
// API's 253 characters: about 1 MB of record, which the single-object
// record of 900 KiB refused at every attempt) is placed; its scheduler is
// killed in the middle of the bindings, with the record's parts and head
// written; the next instance's recovery reads the record whole and
// finishes the commit (right after it, every pod bound): every claim
// allocated once and reserved for its pod, no device twice, no record or
// part left. (Rolling back a killed 10,000-pod commit is
// commit.TestRecoverLargeGangAfterCrash.)
func TestSchedulerLargeGang(t *testing.T) {
	pods := largeGangPods(t)
	const claimsPerPod, gpusPerNode = 2, 64
	cp := framework.StartT(t, framework.Options{})
	admin := cp.AdminClient(t)
	itest.FabricCluster(t, admin, []string{"a"}, (pods*claimsPerPod+gpusPerNode-1)/gpusPerNode, gpusPerNode)
	client := schedulerClient(t, cp, "gpufabric-scheduler")
	const ns = "big"
	itest.GangNamespace(t, admin, ns, 1)
	start := time.Now()
	createLongNamedGang(t, admin, ns, "train", pods, claimsPerPod)
	t.Logf("created %d pods and %d claims in %v", pods, pods*claimsPerPod, time.Since(start))

	var bindings atomic.Int64
	kill := func(step gate.Step, object string) error {
		if step == gate.StepBind && strings.HasPrefix(object, ns+"/") && bindings.Add(1) == int64(pods/2) {
			return errKilled
		}
		return nil
	}
	start = time.Now()
	first := startScheduler(t, client, scheduler.Config{CommitHook: kill})
	select {
	case <-first.done:
	case <-time.After(5 * time.Minute):
		t.Fatal("first scheduler was not killed")
	}
	if !errors.Is(first.err, gate.ErrAborted) {
		t.Fatalf("first scheduler ended with %v, want the kill", first.err)
	}
	parts, err := admin.CoreV1().ConfigMaps(itest.RecordNamespace).List(t.Context(), metav1.ListOptions{LabelSelector: vocab.LabelCommitRecordPart})
	itest.Must(t, "list record parts", err)
	if len(parts.Items) == 0 {
		t.Fatal("the killed commit left no record parts: the record fit one object, so this test does not test parts")
	}
	t.Logf("killed after %d bindings in %v; record in %d objects", pods/2, time.Since(start), 1+len(parts.Items))

	start = time.Now()
	recovered := make(chan error, 1)
	startScheduler(t, client, scheduler.Config{OnRecovered: func() {
		st, err := itest.ReadGang(context.Background(), admin, ns)
		if err == nil && (st.Bound() != pods || len(st.Records) != 0) {
			err = fmt.Errorf("after recovery: %d of %d bound, records %v; want all bound, no record", st.Bound(), pods, st.Records)
		}
		if err == nil {
			err = st.Consistent(true)
		}
		recovered <- err
	}})
	select {
	case err := <-recovered:
		itest.Must(t, "finished by recovery", err)
	case <-time.After(5 * time.Minute):
		t.Fatal("second scheduler did not recover")
	}
	itest.Poll(t, "gang bound", time.Minute, func(ctx context.Context) error {
		st, err := itest.ReadGang(ctx, admin, ns)
		if err != nil {
			return err
		}
		if st.Bound() != pods || st.Allocated() != pods*claimsPerPod {
			return fmt.Errorf("%d of %d bound, %d of %d claims allocated", st.Bound(), pods, st.Allocated(), pods*claimsPerPod)
		}
		return st.Consistent(true)
	})
	t.Logf("recovered in %v", time.Since(start))
	checkNoRecordObjects(t, admin)
	twice, err := itest.DevicesAllocatedTwice(t.Context(), admin)
	itest.Must(t, "devices", err)
	if len(twice) > 0 {
		t.Errorf("devices allocated twice: %v", twice)
	}
}

// createLongNamedGang creates PodGroup group (minCount n, no topology
// key) and n members, each with claims claims of 1 GPU of its own, all
// named with close to 253 characters, in parallel.
func createLongNamedGang(t *testing.T, c kubernetes.Interface, ns, group string, n, claims int) {
	t.Helper()
	pg := &schedulingv1beta1.PodGroup{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: group},
		Spec: schedulingv1beta1.PodGroupSpec{SchedulingPolicy: schedulingv1beta1.PodGroupSchedulingPolicy{Gang: &schedulingv1beta1.GangSchedulingPolicy{MinCount: int32(n)}}}}
	_, err := c.SchedulingV1beta1().PodGroups(ns).Create(t.Context(), pg, metav1.CreateOptions{})
	itest.Must(t, "create podgroup", err)
	long := strings.Repeat("x", 236)
	err = commit.Parallel(t.Context(), 16, n, func(ctx context.Context, i int) error {
		var names []string
		for k := range claims {
			name := fmt.Sprintf("%s-%05d-gpus-%d", long, i, k)
			if _, err := c.ResourceV1().ResourceClaims(ns).Create(ctx, itest.GPUClaim(ns, name, 1), metav1.CreateOptions{}); err != nil {
				return err
			}
			names = append(names, name)
		}
		_, err := c.CoreV1().Pods(ns).Create(ctx, claimPod(ns, fmt.Sprintf("%s-worker-%05d", long, i), group, names...), metav1.CreateOptions{})
		return err
	})
	itest.Must(t, "create gang", err)
}

// claimPod is a member of group (none: "") whose container uses the
// named claims, by resourceClaimName, and tolerates every taint.
func claimPod(ns, name, group string, claims ...string) *corev1.Pod {
	p := itest.MemberPod(ns, name, group, "c0", claims[0])
	p.Spec.Tolerations = []corev1.Toleration{{Operator: corev1.TolerationOpExists}}
	p.Spec.ResourceClaims, p.Spec.Containers[0].Resources.Claims = nil, nil
	for i, c := range claims {
		ref := fmt.Sprintf("c%d", i)
		p.Spec.ResourceClaims = append(p.Spec.ResourceClaims, corev1.PodResourceClaim{Name: ref, ResourceClaimName: ptr.To(c)})
		p.Spec.Containers[0].Resources.Claims = append(p.Spec.Containers[0].Resources.Claims, corev1.ResourceClaim{Name: ref})
	}
	return p
}

// checkNoRecordObjects fails the test when a commit record or a part of
// one is left in the scheduler's namespace.
func checkNoRecordObjects(t *testing.T, c kubernetes.Interface) {
	t.Helper()
	for _, label := range []string{vocab.LabelCommitRecord, vocab.LabelCommitRecordPart} {
		left, err := c.CoreV1().ConfigMaps(itest.RecordNamespace).List(t.Context(), metav1.ListOptions{LabelSelector: label})
		itest.Must(t, "list records", err)
		if len(left.Items) > 0 {
			t.Errorf("%d objects labelled %s left after the commit", len(left.Items), label)
		}
	}
}

// TestSchedulerClaimNamedByMembers: two members of a gang that name one
// ResourceClaim (resourceClaimName) besides a GPU claim each get it
// allocated once, on one node's GPU, reserved for both pods (as
// kube-scheduler reserves a claim shared by pods), and both run on that
// node, which is the only one with room for the three GPUs; no record is
// rejected or left. Before, the claim was allocated for each member, the
// second write conflicted, the undo rejected the scheduler's own record,
// and the gang was never placed. A gang where only two of three members
// name a claim is refused with the reason.
func TestSchedulerClaimNamedByMembers(t *testing.T) {
	cp := framework.StartT(t, framework.Options{})
	admin := cp.AdminClient(t)
	itest.FabricCluster(t, admin, []string{"a"}, 1, 4)
	itest.FabricCluster(t, admin, []string{"b"}, 2, 2)
	client := schedulerClient(t, cp, "gpufabric-scheduler")
	const ns = "share"
	itest.GangNamespace(t, admin, ns, 1)
	for _, name := range []string{"cache", "p0-gpu", "p1-gpu", "odd", "q0-gpu", "q1-gpu", "q2-gpu"} {
		_, err := admin.ResourceV1().ResourceClaims(ns).Create(t.Context(), itest.GPUClaim(ns, name, 1), metav1.CreateOptions{})
		itest.Must(t, "create claim", err)
	}
	group := func(name string, n int32) {
		pg := &schedulingv1beta1.PodGroup{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: schedulingv1beta1.PodGroupSpec{SchedulingPolicy: schedulingv1beta1.PodGroupSchedulingPolicy{Gang: &schedulingv1beta1.GangSchedulingPolicy{MinCount: n}}}}
		_, err := admin.SchedulingV1beta1().PodGroups(ns).Create(t.Context(), pg, metav1.CreateOptions{})
		itest.Must(t, "create podgroup", err)
	}
	pod := func(name, group string, claims ...string) {
		_, err := admin.CoreV1().Pods(ns).Create(t.Context(), claimPod(ns, name, group, claims...), metav1.CreateOptions{})
		itest.Must(t, "create pod", err)
	}
	group("pair", 2)
	pod("p0", "pair", "p0-gpu", "cache")
	pod("p1", "pair", "cache", "p1-gpu")
	group("odd", 3)
	pod("q0", "odd", "q0-gpu", "odd")
	pod("q1", "odd", "q1-gpu", "odd")
	pod("q2", "odd", "q2-gpu")
	startScheduler(t, client, scheduler.Config{})

	itest.Poll(t, "pair bound", 60*time.Second, func(ctx context.Context) error {
		var nodes []string
		for _, name := range []string{"p0", "p1"} {
			p, err := admin.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if p.Spec.NodeName == "" {
				return fmt.Errorf("pod %s unbound", name)
			}
			nodes = append(nodes, p.Spec.NodeName)
		}
		if nodes[0] != "a-0" || nodes[1] != "a-0" {
			return fmt.Errorf("pods on %v, want both on a-0 (the node with room for the shared claim and both GPUs)", nodes)
		}
		return nil
	})
	c, err := admin.ResourceV1().ResourceClaims(ns).Get(t.Context(), "cache", metav1.GetOptions{})
	itest.Must(t, "get claim", err)
	var to []string
	for _, r := range c.Status.ReservedFor {
		to = append(to, r.Resource+"/"+r.Name)
	}
	if c.Status.Allocation == nil || len(c.Status.Allocation.Devices.Results) != 1 || c.Status.Allocation.Devices.Results[0].Pool != "a-0" ||
		strings.Join(to, ",") != "pods/p0,pods/p1" {
		t.Errorf("shared claim allocation %+v reserved for %v, want one GPU of a-0 for pods/p0,pods/p1", c.Status.Allocation, to)
	}
	twice, err := itest.DevicesAllocatedTwice(t.Context(), admin)
	itest.Must(t, "devices", err)
	if len(twice) > 0 {
		t.Errorf("devices allocated twice: %v", twice)
	}

	itest.Poll(t, "odd gang refused with the reason", 60*time.Second, func(ctx context.Context) error {
		pg, err := admin.SchedulingV1beta1().PodGroups(ns).Get(ctx, "odd", metav1.GetOptions{})
		if err != nil {
			return err
		}
		cond := meta.FindStatusCondition(pg.Status.Conditions, schedulingv1beta1.PodGroupInitiallyScheduled)
		if cond == nil || cond.Reason != vocab.ReasonUnschedulable || !strings.Contains(cond.Message, "claim share/odd is named by 2 of the gang's 3 members (q0, q1)") {
			return fmt.Errorf("condition %+v", cond)
		}
		return nil
	})
	events, err := admin.EventsV1().Events(ns).List(t.Context(), metav1.ListOptions{})
	itest.Must(t, "list events", err)
	for _, e := range events.Items {
		if e.Reason == vocab.EventCommitRecordRejected {
			t.Errorf("event %s: %s", e.Reason, e.Note)
		}
	}
	claims, err := admin.ResourceV1().ResourceClaims(ns).List(t.Context(), metav1.ListOptions{})
	itest.Must(t, "list claims", err)
	for _, c := range claims.Items {
		if strings.HasPrefix(c.Name, "q") || c.Name == "odd" {
			if c.Status.Allocation != nil {
				t.Errorf("claim %s of the refused gang is allocated", c.Name)
			}
		}
	}
	checkNoRecordObjects(t, admin)
}
