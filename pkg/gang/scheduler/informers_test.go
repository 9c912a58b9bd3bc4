package scheduler

import (
	"context"
	"github.com/gpufabric/gpufabric/pkg/gang/internal/objtest"
	"slices"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/gpufabric/gpufabric/pkg/gang/queue"
	"github.com/gpufabric/gpufabric/pkg/topology"
)

// TestChainFirst: a first handler runs before the queue's handler of its
// informer, in one handler, for adds, updates and deletes; one whose
// informer has no queue handler is added alone; other handlers are kept.
func TestChainFirst(t *testing.T) {
	factory := informers.NewSharedInformerFactory(fake.NewClientset(), 0)
	pods, claims, nodes := factory.Core().V1().Pods().Informer(), factory.Resource().V1().ResourceClaims().Informer(), factory.Core().V1().Nodes().Informer()
	var calls []string
	rec := func(name string) cache.ResourceEventHandlerFuncs {
		return cache.ResourceEventHandlerFuncs{
			AddFunc:    func(any) { calls = append(calls, name+" add") },
			UpdateFunc: func(any, any) { calls = append(calls, name+" update") },
			DeleteFunc: func(any) { calls = append(calls, name+" delete") },
		}
	}
	out := chainFirst(
		[]informerHandler{{pods, rec("cache")}, {nodes, rec("cache-nodes")}},
		[]informerHandler{{pods, rec("queue")}, {pods, rec("bump")}, {claims, rec("queue-claims")}})
	if len(out) != 4 || out[0].inf != pods || out[1].inf != pods || out[2].inf != claims || out[3].inf != nodes {
		t.Fatalf("handlers %d: %+v", len(out), out)
	}
	out[0].h.OnAdd(nil, false)
	out[0].h.OnUpdate(nil, nil)
	out[0].h.OnDelete(nil)
	want := []string{"cache add", "queue add", "cache update", "queue update", "cache delete", "queue delete"}
	if !slices.Equal(calls, want) {
		t.Errorf("calls %q, want %q", calls, want)
	}
	calls = nil
	out[1].h.OnAdd(nil, false)
	out[3].h.OnAdd(nil, false)
	if want := []string{"bump add", "cache-nodes add"}; !slices.Equal(calls, want) {
		t.Errorf("calls %q, want %q", calls, want)
	}
}

// TestPodChangedSkipsStatusOnly: an update of a pending member wakes its
// parked gang unless only the status (less the phase and claim statuses),
// resourceVersion, managedFields or finalizers changed, as kube-scheduler's
// isPodUpdated: the scheduler's own PodScheduled and nominatedNodeName
// writes must not cost the gang a refused attempt.
func TestPodChangedSkipsStatusOnly(t *testing.T) {
	member := func() *v1.Pod {
		p := objtest.Pod("m0")
		p.ResourceVersion = "10"
		p.Spec.SchedulerName = topology.SchedulerName
		p.Spec.SchedulingGroup = &v1.PodSchedulingGroup{PodGroupName: ptr.To("pg")}
		return p
	}
	for _, tc := range []struct {
		name   string
		change func(p *v1.Pod)
		wake   bool
	}{
		{"PodScheduled condition written", func(p *v1.Pod) {
			p.Status.Conditions = []v1.PodCondition{{Type: v1.PodScheduled, Status: v1.ConditionFalse, Reason: v1.PodReasonUnschedulable}}
		}, false},
		{"nominated node written", func(p *v1.Pod) { p.Status.NominatedNodeName = "n1" }, false},
		{"finalizer added", func(p *v1.Pod) { p.Finalizers = []string{"example.com/f"} }, false},
		{"managed fields only", func(p *v1.Pod) { p.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "x"}} }, false},
		{"label added", func(p *v1.Pod) { p.Labels = map[string]string{"a": "b"} }, true},
		{"annotation added", func(p *v1.Pod) { p.Annotations = map[string]string{"a": "b"} }, true},
		{"claim status added", func(p *v1.Pod) {
			p.Status.ResourceClaimStatuses = []v1.PodResourceClaimStatus{{Name: "gpu", ResourceClaimName: ptr.To("m0-gpu")}}
		}, true},
		{"toleration added", func(p *v1.Pod) { p.Spec.Tolerations = []v1.Toleration{{Key: "k", Operator: v1.TolerationOpExists}} }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := testingclock.NewFakeClock(time.Unix(1000, 0))
			gq := queue.New(queue.Config{InitialBackoff: 10 * time.Millisecond, MaxBackoff: 10 * time.Millisecond, MaxUnschedulableWait: time.Hour, Clock: clk})
			key := queue.KeyOf(member())
			gq.Park(key, gq.Cycle())
			clk.Step(30 * time.Millisecond) // backoff over, parked
			old, p := member(), member()
			p.ResourceVersion = "11"
			tc.change(p)
			podChanged(gq, old, p)
			want, wait := "", 200*time.Millisecond
			if tc.wake {
				want, wait = key, time.Second
			}
			if k := nextKey(gq, wait); k != want {
				t.Fatalf("got %q, want %q", k, want)
			}
		})
	}
}

// nextKey returns the key the queue hands out within d, or "" (then the
// queue is shut down).
func nextKey(q queue.Interface, d time.Duration) string {
	got := make(chan string, 1)
	go func() {
		k, _ := q.Get()
		got <- k
	}()
	select {
	case k := <-got:
		q.Done(k)
		return k
	case <-time.After(d):
		q.ShutDown() // unblocks the getter; the queue is not reused
		<-got
		return ""
	}
}

// TestTrimObject: informer objects lose their managedFields and keep the
// rest (annotations, status).
func TestTrimObject(t *testing.T) {
	p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Annotations: map[string]string{"a": "b"},
		ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl", Operation: metav1.ManagedFieldsOperationApply}}},
		Status: v1.PodStatus{Phase: v1.PodRunning}}
	out, err := trimObject(p)
	if err != nil {
		t.Fatal(err)
	}
	got := out.(*v1.Pod)
	if got.ManagedFields != nil || got.Annotations["a"] != "b" || got.Status.Phase != v1.PodRunning {
		t.Errorf("trimmed pod %+v", got.ObjectMeta)
	}
	if _, err := trimObject("not an object"); err != nil {
		t.Errorf("a non-object: %v", err)
	}
}

// TestUngatedTimesFollowTheInformer: on an informer, a member whose last
// gate went is noted before the queue hears of the update; its gang is
// still noted when the queue hears that one of two members went, and
// forgotten with its last pod; a gang of one goes with its pod.
func TestUngatedTimesFollowTheInformer(t *testing.T) {
	client := fake.NewClientset()
	factory := informers.NewSharedInformerFactory(client, 0)
	s, err := newInformerSet(factory, false)
	if err != nil {
		t.Fatal(err)
	}
	q := &ungateProbe{s: s, seen: map[string][]bool{}}
	if err := s.watch(q, nil); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer factory.Shutdown()
	defer cancel() // stops the informers before Shutdown waits for them
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())
	pods := client.CoreV1().Pods("ns")
	pod := func(name, group string, gated bool) *v1.Pod {
		p := objtest.Pod(name)
		p.Spec.SchedulerName = topology.SchedulerName
		if group != "" {
			p.Spec.SchedulingGroup = &v1.PodSchedulingGroup{PodGroupName: ptr.To(group)}
		}
		if gated {
			p.Spec.SchedulingGates = []v1.PodSchedulingGate{{Name: "example.com/admission"}}
		}
		return p
	}
	a, solo := queue.PodGroupKey("ns", "a"), queue.KeyOf(pod("solo", "", false))
	step := func(what string, do func() error, key string, adds int, noted bool) {
		t.Helper()
		if err := do(); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		eventually(t, what, func() bool { n, last := q.last(key); return n >= adds && last == noted })
	}
	for _, p := range []*v1.Pod{pod("a-0", "a", true), pod("a-1", "a", false)} {
		step("create "+p.Name, func() error { _, err := pods.Create(t.Context(), p, metav1.CreateOptions{}); return err }, a, 0, false)
	}
	step("ungate a-0", func() error {
		_, err := pods.Update(t.Context(), pod("a-0", "a", false), metav1.UpdateOptions{})
		return err
	}, a, 3, true)
	step("create solo", func() error {
		_, err := pods.Create(t.Context(), pod("solo", "", true), metav1.CreateOptions{})
		return err
	}, solo, 1, false)
	step("ungate solo", func() error {
		_, err := pods.Update(t.Context(), pod("solo", "", false), metav1.UpdateOptions{})
		return err
	}, solo, 2, true)
	step("delete a-0", func() error { return pods.Delete(t.Context(), "a-0", metav1.DeleteOptions{}) }, a, 4, true)
	step("delete a-1", func() error { return pods.Delete(t.Context(), "a-1", metav1.DeleteOptions{}) }, a, 5, false)
	if err := pods.Delete(t.Context(), "solo", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "solo forgotten", func() bool { return s.ungated.Len() == 0 })
}

// ungateProbe is the queue of TestUngatedTimesFollowTheInformer: for each
// key it is told of, whether its gang had an ungate time then.
type ungateProbe struct {
	s    *informerSet
	mu   sync.Mutex
	seen map[string][]bool
}

func (q *ungateProbe) Add(key string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.seen[key] = append(q.seen[key], !q.s.ungated.At(key).IsZero())
}

// last returns how often key was added and whether its gang had a time
// at the last add.
func (q *ungateProbe) last(key string) (int, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	s := q.seen[key]
	return len(s), len(s) > 0 && s[len(s)-1]
}

func (q *ungateProbe) FlushParked()        {}
func (q *ungateProbe) NodeResourcesFreed() {}
func (q *ungateProbe) DevicesFreed(int)    {}
func (q *ungateProbe) WakeWaiting(string)  {}

// eventually polls cond for up to 10 s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting: %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
