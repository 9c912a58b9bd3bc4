package scheduler

import (
	"bytes"
	"context"
	"fmt"
	"github.com/gpufabric/gpufabric/pkg/gang/vocab"
	"github.com/gpufabric/gpufabric/test/integration/itest"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/gpufabric/gpufabric/pkg/gang/scheduler"
	"github.com/gpufabric/gpufabric/test/integration/framework"
)

// TestSchedulerWaitingWritesYield: a gang's round of waiting-status writes
// (PodScheduled on each pending member, run by the worker) stops once the
// members it waited for have arrived, so it does not hold up the attempt
// that places the gang; the stale PodGroup condition is not written either.
//
// Seven of a gang's eight members exist before its PodGroup; the
// scheduler writes one pod at a time (CommitParallelism 1) and the test
// holds its first waiting write on the wire until the eighth member has
// existed for 2 s. After that write, none of the six other members gets
// the waiting message and the PodGroup no WaitingForMembers condition
// (before this rule: six more pod writes, then the condition, then the
// placement), and the gang is bound.
func TestSchedulerWaitingWritesYield(t *testing.T) {
	cp := framework.StartT(t, framework.Options{})
	ctx := t.Context()
	admin := cp.AdminClient(t)
	itest.FabricCluster(t, admin, []string{"a"}, 2, 8)
	const ns, group, members = "waiting", "g", 8
	itest.Must(t, "create namespace", framework.EnsureNamespace(ctx, admin, ns))
	itest.Must(t, "create service account", framework.EnsureServiceAccount(ctx, admin, ns))
	for i := range members {
		_, err := admin.ResourceV1().ResourceClaims(ns).Create(ctx, itest.GPUClaim(ns, fmt.Sprintf("%s-%d-gpu", group, i), 1), metav1.CreateOptions{})
		itest.Must(t, "create claim", err)
	}
	hold := &waitingHold{release: make(chan struct{}), held: make(chan struct{})}
	startScheduler(t, heldSchedulerClient(t, cp, hold), scheduler.Config{CommitParallelism: 1})
	for i := range members - 1 {
		createWaitingMember(t, admin, ns, group, i)
	}
	// The scheduler has seen all seven once it has told each that its
	// PodGroup does not exist.
	itest.Poll(t, "members told their PodGroup is missing", 30*time.Second, func(ctx context.Context) error {
		return podsWithReason(ctx, admin, ns, vocab.ReasonPodGroupNotFound, members-1)
	})
	pg := &schedulingv1beta1.PodGroup{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: group},
		Spec: schedulingv1beta1.PodGroupSpec{SchedulingPolicy: schedulingv1beta1.PodGroupSchedulingPolicy{
			Gang: &schedulingv1beta1.GangSchedulingPolicy{MinCount: members}}}}
	_, err := admin.SchedulingV1beta1().PodGroups(ns).Create(ctx, pg, metav1.CreateOptions{})
	itest.Must(t, "create podgroup", err)
	select {
	case <-hold.held:
	case <-time.After(30 * time.Second):
		t.Fatal("the scheduler wrote no waiting status")
	}
	createWaitingMember(t, admin, ns, group, members-1)
	time.Sleep(2 * time.Second) // the scheduler's informer gets the last member
	close(hold.release)
	waitBound(t, admin, ns, group, members)

	pods, condition := hold.counts()
	if pods != 1 || condition != 0 {
		t.Errorf("after the last member arrived: %d members written as waiting (want only the held one), %d WaitingForMembers conditions written (want none)", pods, condition)
	}
}

func createWaitingMember(t *testing.T, c kubernetes.Interface, ns, group string, i int) {
	t.Helper()
	name := fmt.Sprintf("%s-%d", group, i)
	p := itest.MemberPod(ns, name, group, "gpu", name+"-gpu")
	p.Spec.Tolerations = []corev1.Toleration{{Operator: corev1.TolerationOpExists}} // kubelet-less nodes are not-ready
	_, err := c.CoreV1().Pods(ns).Create(t.Context(), p, metav1.CreateOptions{})
	itest.Must(t, "create pod", err)
}

// podsWithReason fails unless n pods of ns have PodScheduled=False with
// reason.
func podsWithReason(ctx context.Context, c kubernetes.Interface, ns, reason string, n int) error {
	pods, err := c.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	got := 0
	for _, p := range pods.Items {
		for _, cond := range p.Status.Conditions {
			if cond.Type == corev1.PodScheduled && cond.Status == corev1.ConditionFalse && cond.Reason == reason {
				got++
			}
		}
	}
	if got != n {
		return fmt.Errorf("%d of %d pods with reason %s", got, n, reason)
	}
	return nil
}

// waitingHold is a client-side wrapper of the scheduler's requests: it
// counts the pod writes that carry the waiting message and the PodGroup
// status writes that set WaitingForMembers, and holds the first pod write
// until release is closed (closing held when it does).
type waitingHold struct {
	release, held chan struct{}

	mu                  sync.Mutex
	podWrites, pgWrites int
}

func (h *waitingHold) counts() (pods, podGroups int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.podWrites, h.pgWrites
}

func (h *waitingHold) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripperFunc(func(r *http.Request) (*http.Response, error) {
		if r.Body == nil || !strings.HasSuffix(r.URL.Path, "/status") {
			return rt.RoundTrip(r)
		}
		body, err := io.ReadAll(r.Body)
		if err != nil {
			return nil, fmt.Errorf("read request body: %w", err)
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		podWrite := strings.Contains(r.URL.Path, "/pods/") && bytes.Contains(body, []byte("waiting for the gang"))
		h.mu.Lock()
		first := podWrite && h.podWrites == 0
		if podWrite {
			h.podWrites++
		}
		if strings.Contains(r.URL.Path, "/podgroups/") && bytes.Contains(body, []byte(vocab.ReasonWaitingForMembers)) {
			h.pgWrites++
		}
		h.mu.Unlock()
		if first {
			close(h.held)
			select {
			case <-h.release:
			case <-r.Context().Done():
			}
		}
		return rt.RoundTrip(r)
	})
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// heldSchedulerClient is schedulerClient with hold wrapped around its
// transport.
func heldSchedulerClient(t *testing.T, cp *framework.ControlPlane, hold *waitingHold) kubernetes.Interface {
	t.Helper()
	const user = "gpufabric-scheduler"
	itest.Must(t, "grant scheduler rules", framework.GrantSchedulerRules(t.Context(), cp.AdminClient(t), user, itest.RecordNamespace))
	cfg, err := cp.UserConfig(user)
	itest.Must(t, "user config", err)
	cfg.Wrap(hold.wrap)
	c, err := kubernetes.NewForConfig(cfg)
	itest.Must(t, "client", err)
	return c
}
