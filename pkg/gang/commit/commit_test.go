package commit

import (
	"context"
	"fmt"
	"github.com/gpufabric/gpufabric/pkg/gang/internal/objtest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/gpufabric/gpufabric/pkg/gang/gate"
	"github.com/gpufabric/gpufabric/pkg/gang/placement"
	"github.com/gpufabric/gpufabric/pkg/gang/vocab"
)

// gatedConditions writes the InitiallyScheduled condition as the loop's
// writer does for a commit: past the gate, then one status update.
type gatedConditions struct {
	client *fake.Clientset
	gate   *gate.Gate
}

func (c gatedConditions) SetInitiallyScheduled(ctx context.Context, pg *schedulingv1beta1.PodGroup, status metav1.ConditionStatus, reason, message string) error {
	if err := c.gate.Check(gate.StepCondition, pg.Namespace+"/"+pg.Name); err != nil {
		return err
	}
	next := pg.DeepCopy()
	next.Status.Conditions = append(next.Status.Conditions, metav1.Condition{Type: vocab.ConditionInitiallyScheduled, Status: status, Reason: reason, Message: message})
	_, err := c.client.SchedulingV1beta1().PodGroups(pg.Namespace).UpdateStatus(ctx, next, metav1.UpdateOptions{})
	return err
}

// TestPlanWrites: shared claims first (reserved for the PodGroup, or for
// every placed member when the members name it themselves), then each
// placed member's; allocated claims only get a missing reservation; a
// claim several members use gets one write reserving it for all of them;
// members the decision left out get nothing.
func TestPlanWrites(t *testing.T) {
	pg := &schedulingv1beta1.PodGroup{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "pg", UID: "uid-pg"}}
	both := objtest.Claim("both", true) // allocated, named by p0 and p1
	g := &placement.Gang{
		SharedClaims: []*resourceapi.ResourceClaim{objtest.Claim("fabric", false), objtest.Claim("done", true, "uid-pg"), objtest.Claim("named", false)},
		MemberShared: map[types.UID]bool{"uid-named": true},
		Members: []placement.Member{
			{Pod: objtest.Pod("p0"), Claims: []*resourceapi.ResourceClaim{objtest.Claim("p0-gpus", false), objtest.Claim("user", true, "uid-other"), both}},
			{Pod: objtest.Pod("p1"), Claims: []*resourceapi.ResourceClaim{objtest.Claim("p1-gpus", false), both}},
			// Left out by a partial placement (minCount): nothing for it.
			{Pod: objtest.Pod("p2"), Claims: []*resourceapi.ResourceClaim{objtest.Claim("p2-gpus", false), objtest.Claim("user2", true, "uid-other"), both}},
		},
	}
	d := &placement.Decision{
		Pods:   []placement.PodPlacement{{Name: "p0", UID: "uid-p0"}, {Name: "p1", UID: "uid-p1"}},
		Claims: []placement.ClaimAllocation{{Name: "fabric", Shared: true}, {Name: "named", Shared: true}, {Name: "p0-gpus"}, {Name: "p1-gpus"}},
	}
	var got []string
	for _, w := range planWrites(pg, g, d) {
		var to []string
		for _, c := range w.consumers {
			to = append(to, c.Resource+"/"+c.Name)
		}
		got = append(got, fmt.Sprintf("%s alloc=%v shared=%v for=%s", w.claim.Name, w.alloc != nil, w.shared, strings.Join(to, ",")))
	}
	want := []string{
		"fabric alloc=true shared=true for=podgroups/pg",
		"named alloc=true shared=true for=pods/p0,pods/p1",
		"p0-gpus alloc=true shared=false for=pods/p0",
		"user alloc=false shared=false for=pods/p0",
		"both alloc=false shared=false for=pods/p0,pods/p1",
		"p1-gpus alloc=true shared=false for=pods/p1",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("writes (-want +got):\n%s", diff)
	}
}

// TestCommitPhases: with parallel writers, every write of a phase starts
// after every write of the previous phase: record, shared claims, per-pod
// claims, bindings, condition, clear. The bindings do run in parallel.
func TestCommitPhases(t *testing.T) {
	const pods, workers = 24, 4
	pg := &schedulingv1beta1.PodGroup{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "pg", UID: "uid-pg"}}
	g := &placement.Gang{Namespace: "ns", Name: "pg", UID: pg.UID, SharedClaims: []*resourceapi.ResourceClaim{objtest.Claim("fabric", false)}}
	d := &placement.Decision{Gang: "ns/pg", Claims: []placement.ClaimAllocation{{Name: "fabric", Shared: true}}}
	objects := []runtime.Object{pg, g.SharedClaims[0]}
	for i := range pods {
		p, c := objtest.Pod(fmt.Sprintf("p%02d", i)), objtest.Claim(fmt.Sprintf("p%02d-gpus", i), false)
		g.Members = append(g.Members, placement.Member{Pod: p, Claims: []*resourceapi.ResourceClaim{c}})
		d.Pods = append(d.Pods, placement.PodPlacement{Namespace: "ns", Name: p.Name, UID: p.UID, Node: "n"})
		d.Claims = append(d.Claims, placement.ClaimAllocation{Name: c.Name, Pod: p.Name})
		objects = append(objects, p, c)
	}
	client := fake.NewClientset(objects...)
	client.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		return a.GetSubresource() == "binding", nil, nil // the fake has no bindings
	})
	var inFlight, peak atomic.Int32 // hooks of bindings running at once
	var mu sync.Mutex
	var phases []int
	hook := func(step gate.Step, object string) error {
		if step == gate.StepBind {
			n := inFlight.Add(1)
			defer inFlight.Add(-1)
			for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
			}
			time.Sleep(2 * time.Millisecond)
		}
		mu.Lock()
		defer mu.Unlock()
		phases = append(phases, commitPhase(step, object))
		return nil
	}
	fence := &gate.Gate{Hook: hook}
	c := New(Config{Client: client, RecordNamespace: "gpufabric-system", Parallelism: workers, Gate: fence,
		Conditions: gatedConditions{client: client, gate: fence}})
	txn := c.Begin(pg, g, d)
	if err := txn.Run(t.Context()); err != nil {
		t.Fatalf("commit: %v", err)
	}
	written := txn.Written()
	if !slices.IsSorted(phases) {
		t.Errorf("phases out of order: %v", phases)
	}
	if len(written) != pods+1 {
		t.Errorf("%d written claims reported, want %d", len(written), pods+1)
	}
	if c.Record(pg.UID) != nil {
		t.Errorf("commit record still known after the commit")
	}
	// record, 2 shared, 2 per pod claim, a binding per pod, condition, clear, done.
	if want := 1 + 2 + 3*pods + 3; len(phases) != want {
		t.Errorf("%d steps, want %d", len(phases), want)
	}
	if p := peak.Load(); p < 2 || p > workers {
		t.Errorf("peak bindings in flight %d, want 2..%d", p, workers)
	}
}

// commitPhase numbers a step by its commit phase.
func commitPhase(step gate.Step, object string) int {
	switch step {
	case gate.StepRecord:
		return 0
	case gate.StepClaimFinalizer, gate.StepClaimStatus:
		if object == "ns/fabric" {
			return 1
		}
		return 2
	case gate.StepBind:
		return 3
	case gate.StepCondition:
		return 4
	case gate.StepClearRecord:
		return 5
	default:
		return 6
	}
}

// TestPlacedMessageSegments: a segmented gang's message says where its
// segments went; a plain gang's says nothing of segments.
func TestPlacedMessageSegments(t *testing.T) {
	g := &placement.Gang{Members: make([]placement.Member, 4)}
	d := &placement.Decision{TopologyKey: "rack", Domain: "r1", Pods: make([]placement.PodPlacement, 4)}
	if got, want := PlacedMessage(g, d), "placed 4 pods in rack r1"; got != want {
		t.Errorf("plain: %q, want %q", got, want)
	}
	d.SegmentTopologyKey = "gpufabric.dev/nvlinkDomain"
	d.Segments = []placement.SegmentPlacement{{Index: 0, Domain: "a", Pods: 2}, {Index: 1, Domain: "b", Pods: 2}}
	if got, want := PlacedMessage(g, d), "placed 4 pods in rack r1; segments in gpufabric.dev/nvlinkDomain: 0 in a, 1 in b"; got != want {
		t.Errorf("segmented: %q, want %q", got, want)
	}
}
