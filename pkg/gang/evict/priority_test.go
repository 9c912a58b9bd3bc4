package evict

import (
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	corelisters "k8s.io/client-go/listers/core/v1"
	policylisters "k8s.io/client-go/listers/policy/v1"
	resourcelisters "k8s.io/client-go/listers/resource/v1"
	schedulingv1listers "k8s.io/client-go/listers/scheduling/v1"
	schedulinglisters "k8s.io/client-go/listers/scheduling/v1beta1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"

	"github.com/gpufabric/gpufabric/pkg/gang/placement/index"
	"github.com/gpufabric/gpufabric/pkg/gang/report"
	"github.com/gpufabric/gpufabric/pkg/gang/vocab"
	"github.com/gpufabric/gpufabric/pkg/topology"
)

// groupIndex serves GroupPods by "namespace/podGroup", as the pod
// informer's index does.
type groupIndex map[string][]*v1.Pod

func newGroupIndex(pods []*v1.Pod) groupIndex {
	f := groupIndex{}
	for _, p := range pods {
		f[p.Namespace+"/"+podGroupName(p)] = append(f[p.Namespace+"/"+podGroupName(p)], p)
	}
	return f
}

func (f groupIndex) GroupPods(namespace, name string) ([]*v1.Pod, error) {
	return append([]*v1.Pod(nil), f[namespace+"/"+name]...), nil
}
func (f groupIndex) NodePods(string) ([]*v1.Pod, error)                     { return nil, nil }
func (f groupIndex) Waiting(*schedulingv1beta1.PodGroup) ([]*v1.Pod, error) { return nil, nil }

// priorityWorld is a namespace "ns" with PriorityClasses high (1000),
// high-never (1000, Never), a PodGroup per spec and its pods.
type priorityWorld struct {
	pods    []*v1.Pod
	groups  []*schedulingv1beta1.PodGroup
	classes []*schedulingv1.PriorityClass
}

func newPriorityWorld() *priorityWorld {
	return &priorityWorld{classes: []*schedulingv1.PriorityClass{
		{ObjectMeta: metav1.ObjectMeta{Name: "high"}, Value: 1000},
		{ObjectMeta: metav1.ObjectMeta{Name: "high-never"}, Value: 1000, PreemptionPolicy: ptr.To(v1.PreemptNever)},
	}}
}

// group adds PodGroup ns/name at class (priority 1000) with whole
// disruption, and n running pods at podPrio.
func (w *priorityWorld) group(name, class string, n int, podPrio int32) *schedulingv1beta1.PodGroup {
	pg := &schedulingv1beta1.PodGroup{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name)},
		Spec: schedulingv1beta1.PodGroupSpec{PriorityClassName: class, Priority: ptr.To[int32](1000),
			DisruptionMode: &schedulingv1beta1.DisruptionMode{All: &schedulingv1beta1.AllDisruptionMode{}}},
	}
	w.groups = append(w.groups, pg)
	for i := range n {
		w.pods = append(w.pods, &v1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name + "-" + string(rune('0'+i)), UID: types.UID("uid-" + name + string(rune('0'+i)))},
			Spec: v1.PodSpec{SchedulerName: topology.SchedulerName, NodeName: "node-a", Priority: ptr.To(podPrio),
				SchedulingGroup: &v1.PodSchedulingGroup{PodGroupName: ptr.To(name)}},
			Status: v1.PodStatus{Phase: v1.PodRunning},
		})
	}
	return pg
}

func (w *priorityWorld) config(t testing.TB, rec events.EventRecorder) Config {
	t.Helper()
	idx := func(objs ...any) cache.Indexer {
		i := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
		for _, o := range objs {
			if err := i.Add(o); err != nil {
				t.Fatal(err)
			}
		}
		return i
	}
	var pods, groups, classes []any
	for _, p := range w.pods {
		pods = append(pods, p)
	}
	for _, g := range w.groups {
		groups = append(groups, g)
	}
	for _, c := range w.classes {
		classes = append(classes, c)
	}
	return Config{
		Report: report.New(rec), Gangs: newGroupIndex(w.pods),
		Pods: corelisters.NewPodLister(idx(pods...)), PodGroups: schedulinglisters.NewPodGroupLister(idx(groups...)),
		Claims: resourcelisters.NewResourceClaimLister(idx()), PDBs: policylisters.NewPodDisruptionBudgetLister(idx()),
		PriorityClasses: schedulingv1listers.NewPriorityClassLister(idx(classes...)),
	}
}

// TestPrioritiesGroup: a PodGroup is resolved with its PriorityClass and
// its pods from the informers: the class's Never forbids preemption even
// though the PodGroup's own field is unset (the PodGroupPreemptionPolicy
// gate is off), and pods admitted at 0 cap a PodGroup asking for 1000. The
// cap is told once per note, and again only once forgotten.
func TestPrioritiesGroup(t *testing.T) {
	w := newPriorityWorld()
	never := w.group("never", "high-never", 2, 1000)
	quota := w.group("quota", "high", 2, 0)
	fine := w.group("fine", "high", 2, 1000)
	rec := events.NewFakeRecorder(10)
	p := NewPriorities(w.config(t, rec))

	if e := p.Group(never); e.Priority != 1000 || !strings.Contains(e.NoPreemption, "PriorityClass high-never has preemptionPolicy Never") {
		t.Errorf("never: %+v, want priority 1000 and no preemption by the class", e)
	}
	e := p.Group(quota)
	if e.Priority != 0 || e.NoPreemption != "" || !strings.Contains(e.Capped, "priority capped at 0 (the PodGroup asks for 1000") {
		t.Errorf("quota: %+v, want priority 0, capped", e)
	}
	if e := p.Group(fine); e.Priority != 1000 || e.Capped != "" || e.NoPreemption != "" {
		t.Errorf("fine: %+v, want 1000 uncapped, may preempt", e)
	}
	if got := p.Rank(quota); got != 0 {
		t.Errorf("rank of quota %d, want 0", got)
	}

	for range 3 {
		p.Tell(quota, e)
		p.Tell(fine, p.Group(fine))
	}
	if n := len(rec.Events); n != 1 {
		t.Fatalf("%d events after telling the same cap three times, want 1", n)
	}
	if got := <-rec.Events; !strings.Contains(got, vocab.EventPriorityCapped) || !strings.Contains(got, "priority capped at 0") {
		t.Errorf("event %q, want %s naming the cap", got, vocab.EventPriorityCapped)
	}
	p.Forget(vocab.PodGroupKey("ns", "quota"))
	p.Tell(quota, e)
	if n := len(rec.Events); n != 1 {
		t.Errorf("%d events after Forget, want the cap told again", n)
	}
}

// TestVictimPriorityCapped: a victim PodGroup is ranked at its effective
// priority too: a group naming a class of 1000 whose pods were admitted at
// 0 is a victim of a gang of 500, whole; one whose pods run at 1000 is not.
func TestVictimPriorityCapped(t *testing.T) {
	w := newPriorityWorld()
	w.group("quota", "high", 2, 0)
	w.group("fine", "high", 2, 1000)
	cfg := w.config(t, events.NewFakeRecorder(10))
	v := &victims{cfg: &cfg}
	vs, err := v.gather(500, &budget{clock: clock.RealClock{}, deadline: time.Now().Add(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	if len(vs.units) != 1 || vs.units[0].Key != vocab.PodGroupKey("ns", "quota") || vs.units[0].Priority != 0 || len(vs.units[0].Pods) != 2 {
		t.Fatalf("units %+v, want the quota group whole at priority 0", vs.units)
	}
	if got := v.priority(w.pods[0], map[string]*victimGroup{}); got != 0 {
		t.Errorf("a quota member's victim priority %d, want 0", got)
	}
}

// TestAfterRefusalNoPreemption: a gang that may not preempt does not look
// for victims and its refusal says why, with its cap.
func TestAfterRefusalNoPreemption(t *testing.T) {
	e := New(Config{})
	a := &Attempt{Key: vocab.PodGroupKey("ns", "g"), PodGroup: &schedulingv1beta1.PodGroup{}, Priority: 0,
		NoPreemption: "PriorityClass high-never has preemptionPolicy Never", Capped: "priority capped at 0 (x)"}
	// Config has no listers: looking for victims would panic.
	msg, err := e.AfterRefusal(t.Context(), a, nil, index.SnapshotInput{})
	if err != nil {
		t.Fatal(err)
	}
	want := "priority capped at 0 (x)\npreemption not allowed: PriorityClass high-never has preemptionPolicy Never"
	if msg != want {
		t.Errorf("message %q, want %q", msg, want)
	}
}

// BenchmarkPrioritiesRank: the queue reads a PodGroup's rank at every
// event about its pods; resolving reads all of them, so the rank reuses a
// resolution for rankTTL. A 10,000-pod gang: Group (every pod) against
// Rank (cached).
func BenchmarkPrioritiesRank(b *testing.B) {
	w := newPriorityWorld()
	pg := w.group("big", "high", 10000, 1000)
	p := NewPriorities(w.config(b, events.NewFakeRecorder(1)))
	b.Run("Group", func(b *testing.B) {
		for b.Loop() {
			p.Group(pg)
		}
	})
	b.Run("Rank", func(b *testing.B) {
		for b.Loop() {
			p.Rank(pg)
		}
	})
}
