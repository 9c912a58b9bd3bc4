package commit

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/events"

	"github.com/gpufabric/gpufabric/pkg/gang/commit/recordwire"
	"github.com/gpufabric/gpufabric/pkg/gang/gate"
	"github.com/gpufabric/gpufabric/pkg/gang/placement"
	"github.com/gpufabric/gpufabric/pkg/gang/report"
	"github.com/gpufabric/gpufabric/pkg/gang/vocab"
	"github.com/gpufabric/gpufabric/pkg/topology"
)

// tree is a placed CompositePodGroup "ns/job" on a fake clientset: leaves
// leaf PodGroups of pods members each. Each leaf has a PodGroup claim
// ("leaf-<g>-fabric", reserved for its PodGroup), each member a claim of
// its own; the first member of every leaf also names "dataset", a claim
// allocated before the commit (reserved for another consumer), so one
// write reserves it for a pod of each leaf. Two members per node.
type tree struct {
	*world
	root   Root
	leaves []Leaf
}

func treeGang(leaves, pods int) *tree {
	t := &tree{world: &world{}, root: Root{Kind: KindCompositePodGroup, Namespace: "ns", Name: "job", UID: "uid-root"}}
	w := t.world
	dataset := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "dataset", UID: "uid-dataset"},
		Status: resourceapi.ResourceClaimStatus{Allocation: &resourceapi.AllocationResult{}, ReservedFor: []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: "other", UID: "uid-other"}}}}
	w.objects = append(w.objects, dataset)
	for g := range leaves {
		name := fmt.Sprintf("leaf-%d", g)
		pg := &schedulingv1beta1.PodGroup{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: uuid(9, g)}}
		gang := &placement.Gang{Namespace: "ns", Name: name, UID: pg.UID, MinCount: pods}
		d := &placement.Decision{Gang: "ns/" + name, Domain: fmt.Sprintf("rack-%d", g), TopologyKey: "gpufabric.dev/rack"}
		claim := func(name string, i int) *resourceapi.ResourceClaim {
			rc := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: uuid(20+g, i)}}
			d.Claims = append(d.Claims, placement.ClaimAllocation{Namespace: "ns", Name: name, UID: rc.UID, Allocation: resourceapi.AllocationResult{
				Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{{Request: "r", Driver: topology.DriverName, Pool: name, Device: "d"}}}}})
			w.objects = append(w.objects, rc)
			return rc
		}
		fabric := claim(name+"-fabric", 1<<20)
		d.Claims[0].Shared = true
		gang.SharedClaims = []*resourceapi.ResourceClaim{fabric}
		pg.Spec.ResourceClaims = []schedulingv1beta1.PodGroupResourceClaim{{Name: "fabric", ResourceClaimName: &fabric.Name}}
		w.objects = append(w.objects, pg)
		for i := range pods {
			node := fmt.Sprintf("node-%d-%d", g, i/2)
			if i%2 == 0 {
				w.nodes = append(w.nodes, &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}})
			}
			pname := fmt.Sprintf("%s-worker-%d", name, i)
			p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: pname, UID: uuid(40+g, i)},
				Spec: v1.PodSpec{SchedulerName: topology.SchedulerName, SchedulingGroup: &v1.PodSchedulingGroup{PodGroupName: &pg.Name}}}
			own := claim(pname+"-gpus", i)
			d.Claims[len(d.Claims)-1].Pod = pname
			m := placement.Member{Pod: p, Claims: []*resourceapi.ResourceClaim{own}}
			p.Spec.ResourceClaims = []v1.PodResourceClaim{{Name: "gpus", ResourceClaimName: &own.Name}}
			if i == 0 {
				m.Claims = append(m.Claims, dataset)
				p.Spec.ResourceClaims = append(p.Spec.ResourceClaims, v1.PodResourceClaim{Name: "data", ResourceClaimName: &dataset.Name})
			}
			gang.Members = append(gang.Members, m)
			d.Pods = append(d.Pods, placement.PodPlacement{Namespace: "ns", Name: pname, UID: p.UID, Node: node})
			w.objects = append(w.objects, p)
		}
		t.leaves = append(t.leaves, Leaf{PodGroup: pg, Gang: gang, Decision: d})
	}
	for _, nd := range w.nodes {
		w.objects = append(w.objects, nd)
	}
	return t
}

// committed is the state of a tree committed whole: every pod bound,
// every claim allocated (the fabric claims, the pods' own and the
// dataset) and reserved (its leaf's PodGroup, its pod; the dataset for
// its other consumer and a pod of each leaf), no record.
func (t *tree) committed() state {
	l, p := len(t.leaves), len(t.leaves[0].Decision.Pods)
	return state{bound: l * p, allocated: l + l*p + 1, reserved: l + l*p + 1 + l}
}

// rolledBack is the state of a tree none of whose writes is left: only
// the dataset, as it was.
func (t *tree) rolledBack() state { return state{allocated: 1, reserved: 1} }

func (t *tree) begin(tb testing.TB, c *Committer) *Txn {
	tb.Helper()
	txn, err := c.BeginTree(t.root, t.leaves)
	if err != nil {
		tb.Fatal(err)
	}
	return txn
}

// conditions returns each leaf's last InitiallyScheduled condition
// message, "" for none, by leaf.
func (t *tree) conditions(tb testing.TB, client *fake.Clientset) []string {
	tb.Helper()
	out := make([]string, len(t.leaves))
	for g, l := range t.leaves {
		pg, err := client.SchedulingV1beta1().PodGroups("ns").Get(context.Background(), l.PodGroup.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			continue
		}
		must(tb, err)
		if pg.UID != l.PodGroup.UID {
			continue
		}
		for _, c := range pg.Status.Conditions {
			if c.Type == vocab.ConditionInitiallyScheduled && c.Status == metav1.ConditionTrue && c.Reason == vocab.ReasonScheduled {
				out[g] = c.Message
			}
		}
	}
	return out
}

// claim reads claim name.
func claimOf(tb testing.TB, client *fake.Clientset, name string) *resourceapi.ResourceClaim {
	tb.Helper()
	rc, err := client.ResourceV1().ResourceClaims("ns").Get(context.Background(), name, metav1.GetOptions{})
	must(tb, err)
	return rc
}

// consumers lists a claim's reservations as "resource/name".
func consumers(rc *resourceapi.ResourceClaim) []string {
	var out []string
	for _, r := range rc.Status.ReservedFor {
		out = append(out, r.Resource+"/"+r.Name)
	}
	slices.Sort(out)
	return out
}

// treePhase numbers a step of a tree's commit by its phase.
func treePhase(step gate.Step, object string) int {
	if (step == gate.StepClaimFinalizer || step == gate.StepClaimStatus) && strings.HasSuffix(object, "-fabric") {
		return 1
	}
	return commitPhase(step, object)
}

// TestTreeCommit: the leaves of a tree commit as one transaction, phase by
// phase over all leaves (record; every leaf's PodGroup claim; every
// member's claims; every binding; every leaf's condition; clear), with
// one record named by the root's UID that names every leaf, each pod's
// leaf and each PodGroup claim's leaf; each leaf's claim is reserved for
// its own PodGroup, a claim members of several leaves name gets one write
// reserving it for all of them, and each leaf's condition says where that
// leaf went.
func TestTreeCommit(t *testing.T) {
	const leaves, pods = 3, 4
	tr := treeGang(leaves, pods)
	tr.parallelism = 4
	client := tr.clientset()
	var recorded *commitRecord
	client.PrependReactor("create", "configmaps", func(a k8stesting.Action) (bool, runtime.Object, error) {
		cm := a.(k8stesting.CreateAction).GetObject().(*v1.ConfigMap)
		rec, err := recordwire.Decode(cm.Name, []byte(cm.Data[RecordKey]))
		if err != nil {
			t.Errorf("record %s: %v", cm.Name, err)
		}
		recorded = rec
		return false, nil, nil
	})
	var mu sync.Mutex
	var phases []int
	var steps []string
	hook := func(step gate.Step, object string) error {
		mu.Lock()
		defer mu.Unlock()
		phases = append(phases, treePhase(step, object))
		steps = append(steps, string(step)+" "+object)
		return nil
	}
	c := tr.committer(client, hook, nil)
	txn := tr.begin(t, c)
	if err := txn.Run(t.Context()); err != nil {
		t.Fatalf("commit: %v", err)
	}
	if !slices.IsSorted(phases) {
		t.Errorf("phases out of order: %v\n%s", phases, strings.Join(steps, "\n"))
	}
	// record, 2 per fabric claim, 2 per own claim, 1 for the dataset, a
	// binding per pod, a condition per leaf, clear, done.
	if want := 1 + 2*leaves + 2*leaves*pods + 1 + leaves*pods + leaves + 2; len(phases) != want {
		t.Errorf("%d steps, want %d:\n%s", len(phases), want, strings.Join(steps, "\n"))
	}
	if got, want := tr.state(t, client), tr.committed(); got != want {
		t.Errorf("after the commit %+v, want %+v", got, want)
	}
	if n := len(txn.Written()); n != leaves+leaves*pods+1 {
		t.Errorf("%d written claims reported, want %d", n, leaves+leaves*pods+1)
	}
	if c.Record(tr.root.UID) != nil {
		t.Error("record still known after the commit")
	}
	for g, msg := range tr.conditions(t, client) {
		if want := fmt.Sprintf("placed %d pods in gpufabric.dev/rack rack-%d", pods, g); msg != want {
			t.Errorf("leaf %d: condition %q, want %q", g, msg, want)
		}
		if got, want := consumers(claimOf(t, client, fmt.Sprintf("leaf-%d-fabric", g))), []string{fmt.Sprintf("podgroups/leaf-%d", g)}; !slices.Equal(got, want) {
			t.Errorf("leaf %d's claim reserved for %v, want %v", g, got, want)
		}
	}
	if got, want := consumers(claimOf(t, client, "dataset")), []string{"pods/leaf-0-worker-0", "pods/leaf-1-worker-0", "pods/leaf-2-worker-0", "pods/other"}; !slices.Equal(got, want) {
		t.Errorf("dataset reserved for %v, want %v", got, want)
	}
	checkTreeRecord(t, tr, recorded)
}

// checkTreeRecord checks the record a tree's commit wrote: version 3, its
// root, every leaf, each pod's leaf, each leaf's claim for its leaf alone.
func checkTreeRecord(t *testing.T, tr *tree, recorded *commitRecord) {
	t.Helper()
	if recorded == nil {
		t.Fatal("no record written")
	}
	pods := len(tr.leaves) * len(tr.leaves[0].Decision.Pods)
	if recorded.Version != recordwire.VersionTree || recorded.Root != tr.root || len(recorded.Groups) != len(tr.leaves) || len(recorded.Pods) != pods {
		t.Errorf("record: version %d, root %+v, %d groups, %d pods", recorded.Version, recorded.Root, len(recorded.Groups), len(recorded.Pods))
	}
	for i, p := range recorded.Pods {
		if want := fmt.Sprintf("leaf-%d-", p.Group); !strings.HasPrefix(p.Name, want) {
			t.Errorf("pods[%d] %s in group %d", i, p.Name, p.Group)
		}
	}
	for _, rc := range recorded.Claims {
		var want []int
		if g, ok := strings.CutSuffix(rc.Name, "-fabric"); ok {
			want = []int{int(g[len(g)-1] - '0')}
		}
		if !slices.Equal(rc.Groups, want) {
			t.Errorf("claim %s recorded for groups %v, want %v", rc.Name, rc.Groups, want)
		}
	}
}

// TestTreeCommitKilled: a tree's commit killed at any phase is, after the
// next term's recovery, all or nothing over the whole tree: rolled back
// (every claim the commit allocated released, every reservation it added
// gone, no condition) when no member of any leaf was bound, else finished
// (every member of every leaf bound, every claim reserved once, every
// leaf's condition set); no record is left.
func TestTreeCommitKilled(t *testing.T) {
	const leaves, pods = 3, 4
	tr := treeGang(leaves, pods)
	tr.parallelism = 2
	tests := []struct {
		name     string
		kill     gate.Hook
		finished bool
	}{
		{"record", killAt(gate.StepRecord, 1), false},
		{"shared claims", killAt(gate.StepClaimStatus, 2), false},
		{"pod claims", killAt(gate.StepClaimStatus, leaves+5), false},
		{"first binding", killAt(gate.StepBind, 1), false},
		{"bindings of the second leaf", killAt(gate.StepBind, pods+2), true},
		{"second condition", killAt(gate.StepCondition, 2), true},
		{"clear record", killAt(gate.StepClearRecord, 1), true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			client := tr.clientset()
			if tc.name == "first binding" {
				tr.parallelism = 1 // no binding past the hook beside the first
				defer func() { tr.parallelism = 2 }()
			}
			err := tr.begin(t, tr.committer(client, tc.kill, nil)).Run(t.Context())
			if !errors.Is(err, gate.ErrAborted) {
				t.Fatalf("run ended with %v, want the kill", err)
			}
			must(t, tr.committer(client, nil, nil).RecoverAll(t.Context()))
			want, conditions := tr.rolledBack(), 0
			if tc.finished {
				want, conditions = tr.committed(), leaves
			}
			if got := tr.state(t, client); got != want {
				t.Errorf("after recovery %+v, want %+v", got, want)
			}
			n := 0
			for _, msg := range tr.conditions(t, client) {
				if msg != "" {
					n++
				}
			}
			if n != conditions {
				t.Errorf("%d leaves with a condition, want %d", n, conditions)
			}
		})
	}
}

// TestTreeRecoverLeafGone: a leaf whose PodGroup was deleted (or replaced)
// before recovery is rolled back as a flat gang's commit is when its
// PodGroup is gone (its PodGroup claim released, no pod of it bound)
// while the tree's other leaves are finished; the record goes.
func TestTreeRecoverLeafGone(t *testing.T) {
	for _, replaced := range []bool{false, true} {
		t.Run(fmt.Sprintf("replaced=%v", replaced), func(t *testing.T) {
			tr := treeGang(3, 4)
			tr.parallelism = 1
			client := tr.clientset()
			err := tr.begin(t, tr.committer(client, killAt(gate.StepBind, 3), nil)).Run(t.Context()) // leaf 0's first two pods bound
			if !errors.Is(err, gate.ErrAborted) {
				t.Fatalf("run ended with %v, want the kill", err)
			}
			pgs := client.SchedulingV1beta1().PodGroups("ns")
			must(t, pgs.Delete(t.Context(), "leaf-1", metav1.DeleteOptions{}))
			if replaced {
				_, err := pgs.Create(t.Context(), &schedulingv1beta1.PodGroup{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "leaf-1", UID: "uid-new"}}, metav1.CreateOptions{})
				must(t, err)
			}
			rec := events.NewFakeRecorder(20)
			c := tr.committer(client, nil, report.New(rec))
			head, err := client.CoreV1().ConfigMaps(recordNS).Get(t.Context(), vocab.RecordName(tr.root.UID), metav1.GetOptions{})
			must(t, err)
			must(t, c.RecoverRecord(t.Context(), head))
			if st := tr.state(t, client); st.records != 0 || st.bound != 8 {
				t.Errorf("after recovery %+v, want leaves 0 and 2 bound (8 pods) and no record", st)
			}
			if rc := claimOf(t, client, "leaf-1-fabric"); rc.Status.Allocation != nil || len(rc.Status.ReservedFor) != 0 {
				t.Errorf("the gone leaf's claim: allocated %v, reserved for %v; want released", rc.Status.Allocation != nil, consumers(rc))
			}
			for _, g := range []int{0, 2} {
				if rc := claimOf(t, client, fmt.Sprintf("leaf-%d-fabric", g)); rc.Status.Allocation == nil || len(rc.Status.ReservedFor) != 1 {
					t.Errorf("leaf %d's claim: allocated %v, reserved for %v", g, rc.Status.Allocation != nil, consumers(rc))
				}
			}
			if got := tr.conditions(t, client); got[0] == "" || got[1] != "" || got[2] == "" {
				t.Errorf("conditions %q, want leaves 0 and 2 only", got)
			}
			if replaced {
				pg, err := pgs.Get(t.Context(), "leaf-1", metav1.GetOptions{})
				must(t, err)
				if len(pg.Status.Conditions) != 0 {
					t.Errorf("the new leaf-1 got conditions %v", pg.Status.Conditions)
				}
			}
		})
	}
}

// TestTreeRecoverUnbindableLeaf: in a finished tree, a leaf none of whose
// pods can be bound (here all gated since the crash) is rolled back, not
// marked scheduled: its claims released (the claim it shares with other
// leaves keeps their reservations), no condition, a warning saying why;
// the other leaves are finished and the record goes.
func TestTreeRecoverUnbindableLeaf(t *testing.T) {
	tr := treeGang(3, 4)
	tr.parallelism = 1
	client := tr.clientset()
	err := tr.begin(t, tr.committer(client, killAt(gate.StepBind, 2), nil)).Run(t.Context()) // leaf 0's first pod bound
	if !errors.Is(err, gate.ErrAborted) {
		t.Fatalf("run ended with %v, want the kill", err)
	}
	for i := range 4 {
		p, err := client.CoreV1().Pods("ns").Get(t.Context(), fmt.Sprintf("leaf-2-worker-%d", i), metav1.GetOptions{})
		must(t, err)
		p.Spec.SchedulingGates = []v1.PodSchedulingGate{{Name: "example.com/hold"}}
		_, err = client.CoreV1().Pods("ns").Update(t.Context(), p, metav1.UpdateOptions{})
		must(t, err)
	}
	rec := events.NewFakeRecorder(20)
	must(t, tr.committer(client, nil, report.New(rec)).RecoverAll(t.Context()))
	// Leaves 0 and 1: 8 pods bound, 2 PodGroup claims and 8 own claims
	// allocated and reserved; the dataset for its consumer and 2 pods.
	if got, want := tr.state(t, client), (state{bound: 8, allocated: 11, reserved: 13}); got != want {
		t.Errorf("after recovery %+v, want %+v", got, want)
	}
	if got := tr.conditions(t, client); got[0] == "" || got[1] == "" || got[2] != "" {
		t.Errorf("conditions %q, want leaves 0 and 1 only", got)
	}
	close(rec.Events)
	warned := 0
	for e := range rec.Events {
		if strings.Contains(e, "no pod of this one could be bound") && strings.Contains(e, "leaf-2-worker-3: pod has scheduling gates") {
			warned++
		}
	}
	if warned != 1 {
		t.Errorf("%d warnings about leaf 2, want 1", warned)
	}
}

// TestTreeRecoverBadLeaf: one leaf whose binding and condition the API
// refuses does not stop the others' recovery: they are bound and get their
// conditions, the error names the bad leaf's pod, and the record stays;
// once the API accepts, the next recovery finishes that leaf too and the
// record goes.
func TestTreeRecoverBadLeaf(t *testing.T) {
	tr := treeGang(3, 4)
	tr.parallelism = 1
	client := tr.clientset()
	err := tr.begin(t, tr.committer(client, killAt(gate.StepBind, 2), nil)).Run(t.Context())
	if !errors.Is(err, gate.ErrAborted) {
		t.Fatalf("run ended with %v, want the kill", err)
	}
	var refuse atomic.Bool
	refuse.Store(true)
	client.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() == "binding" && refuse.Load() && a.(k8stesting.CreateAction).GetObject().(*v1.Binding).Name == "leaf-1-worker-2" {
			return true, nil, apierrors.NewInternalError(errors.New("binding refused"))
		}
		return false, nil, nil
	})
	client.PrependReactor("update", "podgroups", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() == "status" && refuse.Load() && a.(k8stesting.UpdateAction).GetObject().(*schedulingv1beta1.PodGroup).Name == "leaf-2" {
			return true, nil, apierrors.NewInternalError(errors.New("status refused"))
		}
		return false, nil, nil
	})
	head, err := client.CoreV1().ConfigMaps(recordNS).Get(t.Context(), vocab.RecordName(tr.root.UID), metav1.GetOptions{})
	must(t, err)
	err = tr.committer(client, nil, nil).RecoverRecord(t.Context(), head)
	if err == nil || !strings.Contains(err.Error(), "leaf-1-worker-2") || !strings.Contains(err.Error(), "status refused") {
		t.Fatalf("recovery: %v, want the refused binding and condition", err)
	}
	if st := tr.state(t, client); st.bound != 11 || st.records != 1 {
		t.Errorf("after the first recovery %+v, want all but one pod bound and the record kept", st)
	}
	if got := tr.conditions(t, client); got[0] == "" || got[1] != "" || got[2] != "" {
		t.Errorf("conditions %q, want leaf 0's only", got)
	}
	refuse.Store(false)
	must(t, tr.committer(client, nil, nil).RecoverAll(t.Context()))
	if got, want := tr.state(t, client), tr.committed(); got != want {
		t.Errorf("after the second recovery %+v, want %+v", got, want)
	}
	if got := tr.conditions(t, client); slices.Contains(got, "") {
		t.Errorf("conditions %q, want every leaf's", got)
	}
}

// TestTreeUndo: a tree's commit whose bindings the API refuses is undone
// from its own record: the whole tree rolled back, an event on every
// leaf saying so, no record rejected.
func TestTreeUndo(t *testing.T) {
	tr := treeGang(3, 2)
	client := tr.clientset()
	client.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		return a.GetSubresource() == "binding", nil, apierrors.NewInternalError(errors.New("binding refused"))
	})
	rec := events.NewFakeRecorder(20)
	err := tr.begin(t, tr.committer(client, nil, report.New(rec))).Run(t.Context())
	if err == nil || !strings.Contains(err.Error(), "binding refused") || strings.Contains(err.Error(), "undo") {
		t.Fatalf("run: %v, want the binding's error and an undo that worked", err)
	}
	if got, want := tr.state(t, client), tr.rolledBack(); got != want {
		t.Errorf("after the undo %+v, want %+v", got, want)
	}
	close(rec.Events)
	var rolled []string
	for e := range rec.Events {
		if strings.Contains(e, vocab.EventCommitRecordRejected) {
			t.Errorf("event %q: the undo rejected the commit's own record", e)
		}
		if strings.Contains(e, vocab.EventCommitRolledBack) && strings.Contains(e, "of compositepodgroup ns/job to gpufabric.dev/rack rack-") {
			rolled = append(rolled, e)
		}
	}
	if len(rolled) != 3 {
		t.Errorf("%d roll-back events naming the tree, want one per leaf: %q", len(rolled), rolled)
	}
}
