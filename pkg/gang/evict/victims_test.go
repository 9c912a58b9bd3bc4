package evict

import (
	"fmt"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	corelisters "k8s.io/client-go/listers/core/v1"
	policylisters "k8s.io/client-go/listers/policy/v1"
	resourcelisters "k8s.io/client-go/listers/resource/v1"
	schedulinglisters "k8s.io/client-go/listers/scheduling/v1beta1"
	"k8s.io/client-go/tools/cache"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/gpufabric/gpufabric/pkg/gang/placement"
	"github.com/gpufabric/gpufabric/pkg/gang/placement/index"
	"github.com/gpufabric/gpufabric/pkg/gang/preemption"
)

// scanListers are the evict room's listers over namespaces ns-0..ns-(n-1),
// each with pods running pods of priority 0 (label app=x) and pdbs
// PodDisruptionBudgets selecting them; the pod lister steps clk by step at
// each List (a scan that takes that long), the others count their lists.
type scanListers struct {
	corelisters.PodLister
	clk       *testingclock.FakeClock
	step      time.Duration
	claims    *countingClaims
	pdbs      *countingPDBs
	podGroups schedulinglisters.PodGroupLister
	podLists  int
}

func (l *scanListers) List(sel labels.Selector) ([]*v1.Pod, error) {
	l.podLists++
	l.clk.Step(l.step)
	return l.PodLister.List(sel)
}

type countingClaims struct {
	resourcelisters.ResourceClaimLister
	lists int
}

func (c *countingClaims) List(sel labels.Selector) ([]*resourceapi.ResourceClaim, error) {
	c.lists++
	return c.ResourceClaimLister.List(sel)
}

type countingPDBs struct {
	policylisters.PodDisruptionBudgetLister
	lists int
}

func (c *countingPDBs) List(sel labels.Selector) ([]*policyv1.PodDisruptionBudget, error) {
	c.lists++
	return c.PodDisruptionBudgetLister.List(sel)
}

func (c *countingPDBs) PodDisruptionBudgets(ns string) policylisters.PodDisruptionBudgetNamespaceLister {
	c.lists++
	return c.PodDisruptionBudgetLister.PodDisruptionBudgets(ns)
}

func newScanListers(t testing.TB, namespaces, pods, pdbs int) *scanListers {
	index := func() cache.Indexer {
		return cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	}
	podIdx, pdbIdx := index(), index()
	for n := range namespaces {
		ns := fmt.Sprintf("ns-%d", n)
		for i := range pods {
			p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("p-%d", i), UID: types.UID(fmt.Sprintf("%s-%d", ns, i)),
				Labels: map[string]string{"app": "x"}}, Spec: v1.PodSpec{NodeName: "n1", Priority: ptr.To[int32](0)}, Status: v1.PodStatus{Phase: v1.PodRunning}}
			if err := podIdx.Add(p); err != nil {
				t.Fatal(err)
			}
		}
		for i := range pdbs {
			pdb := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("b-%d", i)},
				Spec:   policyv1.PodDisruptionBudgetSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "x"}}},
				Status: policyv1.PodDisruptionBudgetStatus{DisruptionsAllowed: 1}}
			if err := pdbIdx.Add(pdb); err != nil {
				t.Fatal(err)
			}
		}
	}
	return &scanListers{
		PodLister: corelisters.NewPodLister(podIdx),
		clk:       testingclock.NewFakeClock(time.Unix(1000, 0)),
		claims:    &countingClaims{ResourceClaimLister: resourcelisters.NewResourceClaimLister(index())},
		pdbs:      &countingPDBs{PodDisruptionBudgetLister: policylisters.NewPodDisruptionBudgetLister(pdbIdx)},
		podGroups: schedulinglisters.NewPodGroupLister(index()),
	}
}

func (l *scanListers) evictor(budget time.Duration) *Evictor {
	return New(Config{Pods: l, PodGroups: l.podGroups, Claims: l.claims, PDBs: l.pdbs, PreemptionBudget: budget, Clock: l.clk})
}

// TestPreemptionScanInsideBudget: the scan of what a preemption may evict
// is part of its budget. When the pods alone use the budget up, the
// claims and PodDisruptionBudgets are not read, no plan is evaluated, and
// the refusal says the budget ran out. Before, the scan of every pod,
// claim and budget (and every budget against every pod) ran whatever the
// budget, which only bounded the evaluation after it.
func TestPreemptionScanInsideBudget(t *testing.T) {
	for _, tc := range []struct {
		name             string
		step             time.Duration // how long listing the pods takes
		wantScan         bool          // claims and budgets read
		wantMsg, dontMsg string
	}{
		{name: "the pods use the budget up", step: 2 * time.Second, wantMsg: "budget of 2s ran out"},
		{name: "within the budget", step: time.Second, wantScan: true, dontMsg: "ran out"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := newScanListers(t, 4, 50, 5)
			l.step = tc.step
			e := l.evictor(2 * time.Second)
			a := &Attempt{Key: "pod:hi/p", Pod: &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "hi", Name: "p"}}, Priority: 1000}
			msg, planned, err := e.preempt(t.Context(), a, preemption.Request{Gang: &placement.Gang{Namespace: "hi", Name: "p", MinCount: 1}}, index.SnapshotInput{})
			if err != nil || planned {
				t.Fatalf("preempt: planned %v, err %v", planned, err)
			}
			if scanned := l.claims.lists > 0 || l.pdbs.lists > 0; scanned != tc.wantScan {
				t.Errorf("claims listed %d times, budgets %d times; want read: %v", l.claims.lists, l.pdbs.lists, tc.wantScan)
			}
			if tc.wantMsg != "" && !strings.Contains(msg, tc.wantMsg) || tc.dontMsg != "" && strings.Contains(msg, tc.dontMsg) {
				t.Errorf("message %q, want %q, not %q", msg, tc.wantMsg, tc.dontMsg)
			}
		})
	}
}

// TestAssignBudgetsPerNamespace: a PodDisruptionBudget covers the victims
// of its own namespace only, and each budget is matched against that
// namespace's pods only.
func TestAssignBudgetsPerNamespace(t *testing.T) {
	l := newScanListers(t, 3, 4, 2)
	vs, err := l.evictor(time.Minute).victims.gather(1000, &budget{clock: l.clk, deadline: l.clk.Now().Add(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	if len(vs.units) != 12 || len(vs.budgets) != 6 {
		t.Fatalf("%d units, %d budgets; want 12, 6", len(vs.units), len(vs.budgets))
	}
	for _, u := range vs.units {
		ns := u.Pods[0].Namespace
		want := map[string]int{ns + "/b-0": 1, ns + "/b-1": 1}
		if fmt.Sprint(u.Budgets) != fmt.Sprint(want) {
			t.Errorf("unit %s: budgets %v, want %v", u.Key, u.Budgets, want)
		}
	}
	if l.pdbs.lists != 3 {
		t.Errorf("budgets listed %d times, want once per namespace with victims (3)", l.pdbs.lists)
	}
}

// BenchmarkGatherVictims: the scan of a preemption over 50 tenants with
// 100 running pods and 10 PodDisruptionBudgets each.
func BenchmarkGatherVictims(b *testing.B) {
	l := newScanListers(b, 50, 100, 10)
	e := l.evictor(time.Hour)
	for b.Loop() {
		if _, err := e.victims.gather(1000, &budget{clock: l.clk, deadline: l.clk.Now().Add(time.Hour)}); err != nil {
			b.Fatal(err)
		}
	}
}
