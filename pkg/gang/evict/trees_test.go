package evict

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	schedulingv1alpha3 "k8s.io/api/scheduling/v1alpha3"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	resourcelisters "k8s.io/client-go/listers/resource/v1"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"

	"github.com/gpufabric/gpufabric/pkg/gang/gate"
	"github.com/gpufabric/gpufabric/pkg/gang/vocab"
	"github.com/gpufabric/gpufabric/pkg/topology"
)

// fakeTrees serves Trees from maps: composites by name, PodGroups.
type fakeTrees struct {
	composites map[string]*schedulingv1alpha3.CompositePodGroup
	groups     []*schedulingv1beta1.PodGroup
	broken     bool // Leaves fails (a tree past its bounds)
}

func (f *fakeTrees) Above(pg *schedulingv1beta1.PodGroup) (string, *schedulingv1alpha3.CompositePodGroup, error) {
	all := ""
	if pg.Spec.DisruptionMode != nil && pg.Spec.DisruptionMode.All != nil {
		all = vocab.PodGroupKey(pg.Namespace, pg.Name)
	}
	var top *schedulingv1alpha3.CompositePodGroup
	for p := pg.Spec.ParentCompositePodGroupName; p != nil; {
		c := f.composites[*p]
		if c == nil {
			break
		}
		if top = c; c.Spec.DisruptionMode != nil && c.Spec.DisruptionMode.All != nil {
			all = vocab.CompositeKey(c.Namespace, c.Name)
		}
		p = c.Spec.ParentCompositePodGroupName
	}
	return all, top, nil
}

func (f *fakeTrees) Leaves(c *schedulingv1alpha3.CompositePodGroup) ([]*schedulingv1beta1.PodGroup, error) {
	if f.broken {
		return nil, errors.New("too wide")
	}
	var out []*schedulingv1beta1.PodGroup
	for _, pg := range f.groups {
		for p := pg.Spec.ParentCompositePodGroupName; p != nil; p = f.composites[*p].Spec.ParentCompositePodGroupName {
			if *p == c.Name {
				out = append(out, pg)
				break
			}
		}
	}
	return out, nil
}

func (f *fakeTrees) Composite(_, name string) *schedulingv1alpha3.CompositePodGroup {
	return f.composites[name]
}

// treeWorld is namespace ns with the tree job (priority 100) > replica >
// PodGroup workers, and PodGroup frontend right under job, each with two
// running pods of priority 100 on node-a, plus a claim reserved for
// workers (its shared claim).
type treeWorld struct {
	*priorityWorld
	trees *fakeTrees
	claim *resourceapi.ResourceClaim
}

func newTreeWorld(all ...string) *treeWorld {
	w := &treeWorld{priorityWorld: newPriorityWorld(), trees: &fakeTrees{composites: map[string]*schedulingv1alpha3.CompositePodGroup{}}}
	for _, c := range []struct{ name, parent string }{{"job", ""}, {"replica", "job"}} {
		cpg := &schedulingv1alpha3.CompositePodGroup{TypeMeta: metav1.TypeMeta{Kind: "CompositePodGroup", APIVersion: "scheduling.k8s.io/v1alpha3"}, ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: c.name, UID: types.UID("uid-" + c.name)},
			Spec: schedulingv1alpha3.CompositePodGroupSpec{Priority: ptr.To[int32](100)}}
		if c.parent != "" {
			cpg.Spec.ParentCompositePodGroupName = ptr.To(c.parent)
		}
		if slices.Contains(all, c.name) {
			cpg.Spec.DisruptionMode = &schedulingv1alpha3.CompositeDisruptionMode{All: &schedulingv1alpha3.AllCompositeDisruptionMode{}}
		}
		w.trees.composites[c.name] = cpg
	}
	for _, l := range []struct{ name, parent string }{{"workers", "replica"}, {"frontend", "job"}} {
		pg := w.group(l.name, "", 2, 100)
		pg.Spec.Priority, pg.Spec.ParentCompositePodGroupName = ptr.To[int32](7), ptr.To(l.parent) // a leaf's own priority is not the tree's
		pg.Spec.DisruptionMode = nil
		if slices.Contains(all, l.name) {
			pg.Spec.DisruptionMode = &schedulingv1beta1.DisruptionMode{All: &schedulingv1beta1.AllDisruptionMode{}}
		}
		w.trees.groups = append(w.trees.groups, pg)
	}
	w.claim = &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "workers-shared", UID: "uid-claim"},
		Status: resourceapi.ResourceClaimStatus{Allocation: &resourceapi.AllocationResult{},
			ReservedFor: []resourceapi.ResourceClaimConsumerReference{{APIGroup: "scheduling.k8s.io", Resource: "podgroups", Name: "workers", UID: "uid-workers"}}}}
	return w
}

func (w *treeWorld) config(t *testing.T, rec events.EventRecorder) Config {
	t.Helper()
	cfg := w.priorityWorld.config(t, rec)
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	if err := idx.Add(w.claim); err != nil {
		t.Fatal(err)
	}
	cfg.Claims, cfg.Trees = resourcelisters.NewResourceClaimLister(idx), w.trees
	return cfg
}

// TestVictimUnitsInTrees: as kube-scheduler 1.37, a running pod of a
// tree is evicted with the highest group above or at its PodGroup whose
// disruptionMode is All (all the running pods of every leaf under it,
// and their PodGroups' shared claims), alone when there is none, and is
// valued at its tree's root priority, never its leaf's. A tree that
// cannot be read leaves its PodGroups standing alone.
func TestVictimUnitsInTrees(t *testing.T) {
	for _, tc := range []struct {
		name   string
		all    []string
		broken bool
		// want: unit key -> pods, priority and claims of every unit.
		want     map[string]int
		priority int32
		claimIn  string
	}{
		{name: "single everywhere: pods one by one", priority: 100,
			want: map[string]int{"pod:ns/frontend-0": 1, "pod:ns/frontend-1": 1, "pod:ns/workers-0": 1, "pod:ns/workers-1": 1}},
		{name: "all on the root: the whole tree", all: []string{"job"}, priority: 100,
			want: map[string]int{"cpg:ns/job": 4}, claimIn: "cpg:ns/job"},
		{name: "all on a middle composite: its subtree", all: []string{"replica"}, priority: 100,
			want: map[string]int{"cpg:ns/replica": 2, "pod:ns/frontend-0": 1, "pod:ns/frontend-1": 1}, claimIn: "cpg:ns/replica"},
		{name: "all on a leaf: that PodGroup", all: []string{"workers"}, priority: 100,
			want: map[string]int{"pg:ns/workers": 2, "pod:ns/frontend-0": 1, "pod:ns/frontend-1": 1}, claimIn: "pg:ns/workers"},
		{name: "all on the root and a leaf: the root", all: []string{"job", "workers"}, priority: 100,
			want: map[string]int{"cpg:ns/job": 4}, claimIn: "cpg:ns/job"},
		{name: "a tree that cannot be read: PodGroups alone, at their own priority", all: []string{"job", "workers"}, broken: true, priority: 7,
			want: map[string]int{"pg:ns/workers": 2, "pod:ns/frontend-0": 1, "pod:ns/frontend-1": 1}, claimIn: "pg:ns/workers"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newTreeWorld(tc.all...)
			w.trees.broken = tc.broken
			cfg := w.config(t, events.NewFakeRecorder(10))
			v := &victims{cfg: &cfg}
			vs, err := v.gather(1000, &budget{clock: clock.RealClock{}, deadline: time.Now().Add(time.Minute)})
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]int{}
			for _, u := range vs.units {
				got[u.Key] = len(u.Pods)
				if u.Priority != tc.priority {
					t.Errorf("unit %s at priority %d, want %d", u.Key, u.Priority, tc.priority)
				}
				if u.Group != strings.Contains(u.Key, "pg:") || u.Composite != vocab.IsCompositeKey(u.Key) {
					t.Errorf("unit %s: group %v composite %v", u.Key, u.Group, u.Composite)
				}
				if has := slices.Contains(u.Claims, w.claim.UID); has != (u.Key == tc.claimIn) {
					t.Errorf("unit %s holds the shared claim: %v, want it in %q", u.Key, has, tc.claimIn)
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("units %v, want %v", got, tc.want)
			}
		})
	}
	t.Run("the root's priority is capped by the tree's pods", func(t *testing.T) {
		w := newTreeWorld("job")
		w.pods[2].Spec.Priority = ptr.To[int32](3) // a frontend pod admitted at 3
		cfg := w.config(t, events.NewFakeRecorder(10))
		vs, err := (&victims{cfg: &cfg}).gather(1000, &budget{clock: clock.RealClock{}, deadline: time.Now().Add(time.Minute)})
		if err != nil || len(vs.units) != 1 || vs.units[0].Priority != 3 {
			t.Fatalf("units %+v, %v: want the tree whole at 3", vs.units, err)
		}
		if e := NewPriorities(cfg).Tree(w.trees.composites["job"], w.trees.groups); e.Priority != 3 || !strings.Contains(e.Capped, "the CompositePodGroup asks for 100") {
			t.Errorf("tree as a preemptor: %+v, want the same priority, capped", e)
		}
	})
}

// recordedConditions records condition writes by PodGroup.
type recordedConditions struct {
	mu     sync.Mutex
	writes map[string]metav1.Condition
}

func (c *recordedConditions) SetCondition(_ context.Context, pg *schedulingv1beta1.PodGroup, cond metav1.Condition) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.writes[pg.Name] = cond
	return nil
}

// TestEvictWholeTree: a nomination whose victim is a CompositePodGroup's
// subtree evicts every pod of it, whichever leaf, gives each leaf
// PodGroup DisruptionTarget and the composite a Preempted event naming
// the preemptor, and knows the leaves' shared claims are theirs while
// their pods run.
func TestEvictWholeTree(t *testing.T) {
	w := newTreeWorld("job")
	rec := events.NewFakeRecorder(20)
	rec.Verbose = true // events name their object's kind
	cfg := w.config(t, rec)
	client := fake.NewClientset()
	var mu sync.Mutex
	var evicted []string
	client.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() == "eviction" {
			mu.Lock()
			evicted = append(evicted, a.(k8stesting.CreateAction).GetObject().(interface{ GetName() string }).GetName())
			mu.Unlock()
		}
		return a.GetSubresource() == "eviction", nil, nil
	})
	conds := &recordedConditions{writes: map[string]metav1.Condition{}}
	cfg.Client, cfg.Gate, cfg.Conditions, cfg.Parallelism = client, &gate.Gate{}, conds, 2
	e := New(cfg)
	a := &Attempt{Key: vocab.PodGroupKey("ns", "urgent"), PodGroup: &schedulingv1beta1.PodGroup{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "urgent"}}, Priority: 1000}
	nm := &nomination{rec: &nominationRecord{Priority: 1000, TopologyKey: topology.TopologyKeyNVLinkDomain, Domain: "dom-a"}}
	for _, p := range w.pods {
		nm.rec.Victims = append(nm.rec.Victims, nominatedPod{Namespace: p.Namespace, Name: p.Name, UID: p.UID, Unit: "cpg:ns/job"})
	}
	live, left, err := e.evictNominated(t.Context(), a, nm)
	if err != nil || left != 4 || len(live) != 4 {
		t.Fatalf("evictNominated: %d left, %v", left, err)
	}
	slices.Sort(evicted)
	if want := []string{"frontend-0", "frontend-1", "workers-0", "workers-1"}; !slices.Equal(evicted, want) {
		t.Errorf("evicted %v, want the whole tree %v", evicted, want)
	}
	for _, leaf := range []string{"workers", "frontend"} {
		c, ok := conds.writes[leaf]
		if !ok || c.Type != schedulingv1beta1.DisruptionTarget || c.Reason != vocab.ReasonPreemptionByScheduler || !strings.Contains(c.Message, "preempted by PodGroup ns/urgent") {
			t.Errorf("%s: condition %+v, want DisruptionTarget naming the preemptor", leaf, c)
		}
	}
	onJob := 0
	for len(rec.Events) > 0 {
		if ev := <-rec.Events; strings.Contains(ev, vocab.EventPreempted) && strings.Contains(ev, "CompositePodGroup") && strings.Contains(ev, "preempted by PodGroup ns/urgent") {
			onJob++
		}
	}
	if onJob != 1 {
		t.Errorf("%d Preempted events on the composite, want 1", onJob)
	}
	if got := e.victims.groupsRunning(nm.rec, live); !got["uid-workers"] || !got["uid-frontend"] {
		t.Errorf("groups running %v, want both leaves while their pods are there", got)
	}
	if got := e.victims.sharedClaimGroup("ns", "workers-shared"); got != "uid-workers" {
		t.Errorf("shared claim's group %q, want workers'", got)
	}
}
