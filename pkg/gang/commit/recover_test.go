package commit

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	corelisters "k8s.io/client-go/listers/core/v1"
	resourcelisters "k8s.io/client-go/listers/resource/v1"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"

	"github.com/gpufabric/gpufabric/pkg/gang/gate"
	"github.com/gpufabric/gpufabric/pkg/gang/placement"
	"github.com/gpufabric/gpufabric/pkg/gang/report"
	"github.com/gpufabric/gpufabric/pkg/gang/vocab"
	"github.com/gpufabric/gpufabric/pkg/topology"
)

// world is a placed Job gang on a fake clientset: its PodGroup, members
// (named as a Job names them, each with its claims by resourceClaimName),
// the decision and the objects.
type world struct {
	pg      *schedulingv1beta1.PodGroup
	g       *placement.Gang
	d       *placement.Decision
	objects []runtime.Object
	nodes   []*v1.Node
	// parallelism of the committer's phases; 0: 16.
	parallelism int
}

// jobGang builds a gang of n members with claims claims each, 8 members per
// node; shared (when set) is one claim every member names.
func jobGang(n, claims int, shared bool) *world {
	pg := &schedulingv1beta1.PodGroup{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "train", UID: "uid-pg"}}
	w := &world{pg: pg, g: &placement.Gang{Namespace: "ns", Name: "train", UID: pg.UID, MinCount: n}, d: &placement.Decision{Gang: "ns/train", Domain: "rack-1"}}
	w.objects = append(w.objects, pg)
	claim := func(name string, uid types.UID, pool, dev string) *resourceapi.ResourceClaim {
		rc := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: uid}}
		w.d.Claims = append(w.d.Claims, placement.ClaimAllocation{Namespace: "ns", Name: name, UID: uid, Allocation: resourceapi.AllocationResult{
			Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{{Request: "r", Driver: topology.DriverName, Pool: pool, Device: dev}}}}})
		w.objects = append(w.objects, rc)
		return rc
	}
	var sharedClaim *resourceapi.ResourceClaim
	if shared {
		sharedClaim = claim("dataset-cache", "uid-dataset-cache", "rack-1", "cache-0")
		w.d.Claims[len(w.d.Claims)-1].Shared = true
		w.g.SharedClaims = []*resourceapi.ResourceClaim{sharedClaim}
		w.g.MemberShared = map[types.UID]bool{sharedClaim.UID: true}
	}
	for i := range n {
		node := fmt.Sprintf("gpu-rack01-node%04d", i/8)
		if i%8 == 0 {
			w.nodes = append(w.nodes, &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}})
		}
		name := fmt.Sprintf("pretrain-llama-70b-worker-%d-%05x", i, (i*7919)%(1<<20))
		p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: uuid(0, i)},
			Spec: v1.PodSpec{SchedulerName: topology.SchedulerName, SchedulingGroup: &v1.PodSchedulingGroup{PodGroupName: &pg.Name}}}
		m := placement.Member{Pod: p}
		for c := range claims {
			cname := fmt.Sprintf("%s-gpus%d-%05x", name, c, (i*31+c)%(1<<20))
			rc := claim(cname, uuid(1+c, i), node, fmt.Sprintf("gpu-%d", i%8*claims+c))
			w.d.Claims[len(w.d.Claims)-1].Pod = name
			m.Claims = append(m.Claims, rc)
			p.Spec.ResourceClaims = append(p.Spec.ResourceClaims, v1.PodResourceClaim{Name: fmt.Sprintf("gpus%d", c), ResourceClaimName: &cname})
		}
		if shared {
			p.Spec.ResourceClaims = append(p.Spec.ResourceClaims, v1.PodResourceClaim{Name: "cache", ResourceClaimName: &sharedClaim.Name})
		}
		w.g.Members = append(w.g.Members, m)
		w.d.Pods = append(w.d.Pods, placement.PodPlacement{Namespace: "ns", Name: name, UID: p.UID, Node: node})
		w.objects = append(w.objects, p)
	}
	for _, nd := range w.nodes {
		w.objects = append(w.objects, nd)
	}
	return w
}

// clientset is a fake clientset holding the world whose bindings set the
// pod's node, as the apiserver's do.
func (w *world) clientset() *fake.Clientset {
	client := fake.NewSimpleClientset(w.objects...) // NewClientset (field management) takes ~10 ms a write at this size
	client.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "binding" {
			return false, nil, nil
		}
		b := a.(k8stesting.CreateAction).GetObject().(*v1.Binding)
		obj, err := client.Tracker().Get(v1.SchemeGroupVersion.WithResource("pods"), b.Namespace, b.Name)
		if err != nil {
			return true, nil, err
		}
		p := obj.(*v1.Pod).DeepCopy()
		if p.Spec.NodeName != "" {
			return true, nil, apierrors.NewConflict(v1.Resource("pods"), p.Name, errors.New("already bound"))
		}
		p.Spec.NodeName = b.Target.Name
		return true, nil, client.Tracker().Update(v1.SchemeGroupVersion.WithResource("pods"), p, p.Namespace)
	})
	return client
}

// committer is one leadership term's commit room on client.
func (w *world) committer(client *fake.Clientset, hook gate.Hook, rep *report.Reporter) *Committer {
	pods := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	claims := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	nodes := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	for _, n := range w.nodes {
		_ = nodes.Add(n)
	}
	fence := &gate.Gate{Hook: hook}
	parallelism := w.parallelism
	if parallelism == 0 {
		parallelism = 16
	}
	return New(Config{Client: client, RecordNamespace: recordNS, Parallelism: parallelism, Gate: fence, Report: rep,
		Conditions: gatedConditions{client: client, gate: fence},
		Pods:       corelisters.NewPodLister(pods), Claims: resourcelisters.NewResourceClaimLister(claims), Nodes: corelisters.NewNodeLister(nodes)})
}

// killAt is a commit hook that aborts at the n-th write of step (a
// crash mid-commit).
func killAt(step gate.Step, n int64) gate.Hook {
	var seen atomic.Int64
	return func(s gate.Step, _ string) error {
		if s == step && seen.Add(1) == n {
			return errKilled
		}
		return nil
	}
}

var errKilled = errors.New("killed by test")

// state counts what the API holds of the world: bound pods, allocated and
// reserved claims, and record objects.
type state struct{ bound, allocated, reserved, records int }

func (w *world) state(t *testing.T, client *fake.Clientset) state {
	t.Helper()
	var st state
	pods, err := client.CoreV1().Pods("ns").List(t.Context(), metav1.ListOptions{})
	must(t, err)
	for _, p := range pods.Items {
		if p.Spec.NodeName != "" {
			st.bound++
		}
	}
	claims, err := client.ResourceV1().ResourceClaims("ns").List(t.Context(), metav1.ListOptions{})
	must(t, err)
	for _, c := range claims.Items {
		if c.Status.Allocation != nil {
			st.allocated++
		}
		st.reserved += len(c.Status.ReservedFor)
	}
	cms, err := client.CoreV1().ConfigMaps(recordNS).List(t.Context(), metav1.ListOptions{})
	must(t, err)
	st.records = len(cms.Items)
	return st
}

// TestRecoverLargeGangAfterCrash: a 10,000-pod gang with two claims per
// pod writes its record in parts; killed in the middle of its claim
// writes, the next term rolls it back (no claim allocated or reserved, no
// record left); killed in the middle of its bindings, the next term binds
// the rest (every claim allocated and reserved once, no record left). Before records were split, this gang never got past its
// record (over 900 KiB).
func TestRecoverLargeGangAfterCrash(t *testing.T) {
	const pods, claims = 10000, 2
	w := jobGang(pods, claims, false)
	for _, tc := range []struct {
		name string
		kill gate.Hook
		want state
	}{
		{"killed-in-claim-writes", killAt(gate.StepClaimStatus, pods), state{}},
		{"killed-in-bindings", killAt(gate.StepBind, pods/2), state{bound: pods, allocated: pods * claims, reserved: pods * claims}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client := w.clientset()
			err := w.committer(client, tc.kill, nil).Begin(w.pg, w.g, w.d).Run(t.Context())
			if !errors.Is(err, gate.ErrAborted) {
				t.Fatalf("run ended with %v, want the kill", err)
			}
			if st := w.state(t, client); st.records < 2 {
				t.Fatalf("%d record objects after the kill, want the head and its parts", st.records)
			}
			must(t, w.committer(client, nil, nil).RecoverAll(t.Context()))
			if got := w.state(t, client); got != tc.want {
				t.Errorf("after recovery %+v, want %+v", got, tc.want)
			}
		})
	}
}

// TestUndoNeverRejectsItsOwnRecord: two members that name one claim get it
// allocated once and reserved for both in one write; when the commit then
// fails (a binding refused), its undo rolls back from the record the
// commit wrote: no CommitRecordRejected, the claim released. Before, the
// record listed the claim twice, the second write conflicted, and the
// undo rejected the record and left the claim reserved for an unbound pod.
func TestUndoNeverRejectsItsOwnRecord(t *testing.T) {
	w := jobGang(2, 0, true)
	client := w.clientset()
	client.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		return a.GetSubresource() == "binding", nil, apierrors.NewInternalError(errors.New("binding refused"))
	})
	rec := events.NewFakeRecorder(10)
	c := w.committer(client, nil, report.New(rec))
	txn := c.Begin(w.pg, w.g, w.d)
	if n := len(txn.writes); n != 1 || len(txn.writes[0].consumers) != 2 {
		t.Fatalf("%d claim writes (%+v), want one for both members", n, txn.writes)
	}
	err := txn.Run(t.Context())
	if err == nil || !strings.Contains(err.Error(), "binding refused") || strings.Contains(err.Error(), "undo") {
		t.Fatalf("run: %v, want the binding's error and an undo that worked", err)
	}
	close(rec.Events)
	for e := range rec.Events {
		if strings.Contains(e, vocab.EventCommitRecordRejected) {
			t.Errorf("event %q: the undo rejected the commit's own record", e)
		}
	}
	if got := w.state(t, client); got != (state{}) {
		t.Errorf("after the undo %+v, want nothing allocated, reserved or recorded", got)
	}
}

// TestRecoverPartialPartsTreatedAsForged: a record whose parts are not all
// there is rejected as a whole: reported, its objects deleted, no claim
// touched (recovery never acts on a partial set; the term's sweep of
// claims reserved for unbound pods releases per-pod reservations).
func TestRecoverPartialPartsTreatedAsForged(t *testing.T) {
	w := jobGang(5000, 2, false)
	client := w.clientset()
	err := w.committer(client, killAt(gate.StepBind, 1), nil).Begin(w.pg, w.g, w.d).Run(t.Context())
	if !errors.Is(err, gate.ErrAborted) {
		t.Fatalf("run ended with %v, want the kill", err)
	}
	parts, err := client.CoreV1().ConfigMaps(recordNS).List(t.Context(), metav1.ListOptions{LabelSelector: vocab.LabelCommitRecordPart})
	must(t, err)
	if len(parts.Items) == 0 {
		t.Fatal("no parts")
	}
	must(t, client.CoreV1().ConfigMaps(recordNS).Delete(t.Context(), parts.Items[0].Name, metav1.DeleteOptions{}))
	before := w.state(t, client)
	rec := events.NewFakeRecorder(10)
	c := w.committer(client, nil, report.New(rec))
	head, err := client.CoreV1().ConfigMaps(recordNS).Get(t.Context(), vocab.RecordName(w.pg.UID), metav1.GetOptions{})
	must(t, err)
	must(t, c.RecoverRecord(context.Background(), head))
	close(rec.Events)
	var rejected int
	for e := range rec.Events {
		if strings.Contains(e, vocab.EventCommitRecordRejected) && strings.Contains(e, "missing") {
			rejected++
		}
	}
	if rejected != 1 {
		t.Errorf("%d rejections naming the missing part, want 1", rejected)
	}
	after := w.state(t, client)
	if after.records != 0 || after.bound != before.bound || after.allocated != before.allocated || after.reserved != before.reserved {
		t.Errorf("before %+v, after %+v: want the records gone and nothing else changed", before, after)
	}
}
