package placement_test

import (
	"context"
	"strings"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/gpufabric/gpufabric/pkg/gang/placement"
	"github.com/gpufabric/gpufabric/pkg/gang/placement/cost"
	"github.com/gpufabric/gpufabric/pkg/gang/placement/index"
	"github.com/gpufabric/gpufabric/pkg/gang/placement/scenario"
)

// slowAllocator is a fake allocator: every call takes took on its own
// clock (no real time passes) and is refused, or runs out of time; it
// counts its calls per node.
type slowAllocator struct {
	now      time.Time
	took     time.Duration
	timedOut bool
	calls    int
	perNode  map[string]int
}

func newSlowAllocator(took time.Duration, timedOut bool) *slowAllocator {
	return &slowAllocator{now: time.Unix(1000, 0), took: took, timedOut: timedOut, perNode: map[string]int{}}
}

func (f *slowAllocator) allocate(_ context.Context, ns *index.NodeState, _ []*resourceapi.ResourceClaim, _ []string, _ index.InFlight) (index.Allocation, error) {
	f.calls++
	f.perNode[ns.Name()]++
	f.now = f.now.Add(f.took)
	return index.Allocation{TimedOut: f.timedOut, Took: f.took, End: f.now}, nil
}

// costCluster is 4 racks of 16 idle 8-GPU nodes, each its own NVLink
// domain (every node's devices differ by content: their nvlinkDomain; all
// have the same shape), and a one-pod gang asking one GPU, tried at the
// levels nvlinkDomain, rack, leaf and cluster.
func costCluster(t *testing.T) (*scenario.Built, *index.Snapshot, *placement.Gang) {
	t.Helper()
	sc := scenario.Scenario{Levels: []string{"rack", "leaf"}, Gangs: []scenario.GangSpec{{Name: "slow", Pods: 1, GPUsPerPod: 1}}}
	for r := range 4 {
		id := string(rune('a' + r))
		sc.Domains = append(sc.Domains, scenario.DomainSpec{ID: "r" + id, Kind: "nvswitch", Nodes: 16, GPUsPerNode: 8,
			Labels: map[string]string{"rack": "r" + id, "leaf": "l0"}})
	}
	b, err := scenario.Build(sc)
	if err != nil {
		t.Fatal(err)
	}
	snap, err := index.NewSnapshot(context.Background(), b.Config.Index, b.Input)
	if err != nil {
		t.Fatal(err)
	}
	return b, snap, b.Gangs[0]
}

// TestPlaceCallBudget: a gang whose every Allocate call is refused stops
// at its call budget (Calls plus CallsPerMember per member) and is
// refused as timed out, naming its claim; without a bound it calls each
// node once, however many levels it tries (the memory of refusals).
func TestPlaceCallBudget(t *testing.T) {
	ctx := context.Background()
	b, snap, g := costCluster(t)
	f := newSlowAllocator(10*time.Millisecond, false)
	cfg := b.Config
	placement.WithAllocator(&cfg, f.allocate)
	cfg.Budget = cost.Budget{Calls: 10}
	d, u, err := placement.Place(ctx, cfg, snap, g)
	if err != nil || d != nil || u == nil {
		t.Fatalf("want a refusal: %v %v", err, d)
	}
	limit := 10 + cost.CallsPerMember
	if f.calls != limit || u.Stats.AllocateCalls != limit {
		t.Errorf("calls %d (stats %d), want the budget's %d", f.calls, u.Stats.AllocateCalls, limit)
	}
	if u.TimedOut == nil || u.TimedOut.Spent != cost.SpentCalls || u.TimedOut.Limit != limit {
		t.Fatalf("TimedOut %+v, want the call budget spent", u.TimedOut)
	}
	want := `timed out: the attempt stopped after 18 allocator calls (its budget); claim "slow-00-gpu" cost 180ms in 18 calls; simplify`
	if !strings.HasPrefix(u.Message, want) {
		t.Errorf("message %q, want it to start with %q", u.Message, want)
	}

	f = newSlowAllocator(10*time.Millisecond, false)
	cfg.Budget = cost.Budget{Calls: -1}
	placement.WithAllocator(&cfg, f.allocate)
	if _, u, err = placement.Place(ctx, cfg, snap, g); err != nil || u == nil {
		t.Fatalf("want a refusal: %v", err)
	}
	for node, n := range f.perNode {
		if n != 1 {
			t.Errorf("node %s called %d times in one Place, want once", node, n)
		}
	}
	if f.calls != 64 || u.TimedOut != nil || !strings.Contains(u.Message, "64 device allocation refused") {
		t.Errorf("unbounded: %d calls, TimedOut %+v, message %q; want each of the 64 nodes once, refused", f.calls, u.TimedOut, u.Message)
	}
}

// TestPlaceTimeBudget: the deadline is compared with the end times the
// allocator reports: with 100 ms calls and a 1 s budget the attempt stops
// after the call that ends past it.
func TestPlaceTimeBudget(t *testing.T) {
	b, snap, g := costCluster(t)
	f := newSlowAllocator(100*time.Millisecond, false)
	cfg := b.Config
	placement.WithAllocator(&cfg, f.allocate)
	cfg.Budget = cost.Budget{Deadline: f.now.Add(time.Second)}
	_, u, err := placement.Place(context.Background(), cfg, snap, g)
	if err != nil || u == nil {
		t.Fatalf("want a refusal: %v", err)
	}
	if f.calls != 11 || u.TimedOut == nil || u.TimedOut.Spent != cost.SpentTime {
		t.Fatalf("calls %d, TimedOut %+v; want 11 calls (the 11th ends at 1.1 s), the time budget spent", f.calls, u.TimedOut)
	}
	if want := "timed out: the attempt stopped after 1.1s of allocator calls (11 calls, past its time budget)"; !strings.HasPrefix(u.Message, want) {
		t.Errorf("message %q, want it to start with %q", u.Message, want)
	}
}

// TestPlaceRemembersTimeouts: once TimedOutConfirmations calls ran out of
// time, the claims are not tried again on nodes of the same shape, in the
// same Place and, through the gang's Memory, in the next ones; the refusal
// says timed out and names the claim. After TimedOutAttempts attempts, or
// when a DeviceClass changes, the nodes are tried again.
func TestPlaceRemembersTimeouts(t *testing.T) {
	ctx := context.Background()
	b, snap, g := costCluster(t)
	f := newSlowAllocator(100*time.Millisecond, true)
	cfg := b.Config
	placement.WithAllocator(&cfg, f.allocate)
	g.Memory = cost.NewMemory()
	var calls []int
	for i := range cost.TimedOutAttempts + 1 {
		before := f.calls
		_, u, err := placement.Place(ctx, cfg, snap, g)
		if err != nil || u == nil || u.TimedOut == nil {
			t.Fatalf("attempt %d: want a timed-out refusal: %v %+v", i, err, u)
		}
		if u.TimedOut.Spent != cost.NotSpent || u.TimedOut.Blame.Claim != "slow-00-gpu" {
			t.Errorf("attempt %d: TimedOut %+v, want no budget spent and the claim blamed", i, u.TimedOut)
		}
		if !strings.HasPrefix(u.Message, `timed out: allocator calls ran out of time; claim "slow-00-gpu"`) {
			t.Errorf("attempt %d: message %q", i, u.Message)
		}
		calls = append(calls, f.calls-before)
	}
	// Two calls for the one shape; none while remembered; then again.
	if want := []int{2, 0, 0, 0, 2}; !equalInts(calls, want) {
		t.Errorf("calls per attempt %v, want %v", calls, want)
	}

	classes := scenario.DeviceClasses()
	classes[0].Spec.Selectors[0].CEL.Expression += ` && device.driver != "other"`
	b.Input.DeviceClasses = classes
	snap2, err := index.NewSnapshot(ctx, b.Config.Index, b.Input)
	if err != nil {
		t.Fatal(err)
	}
	before := f.calls
	if _, _, err := placement.Place(ctx, cfg, snap2, g); err != nil {
		t.Fatal(err)
	}
	if f.calls-before != 2 {
		t.Errorf("after a DeviceClass changed: %d calls, want the memory forgotten (2)", f.calls-before)
	}
}

// TestPlaceRemembersRefusals: a gang's refused calls are not repeated in
// its next attempts; a node whose free devices changed is asked again.
func TestPlaceRemembersRefusals(t *testing.T) {
	ctx := context.Background()
	b, snap, g := costCluster(t)
	f := newSlowAllocator(time.Millisecond, false)
	cfg := b.Config
	placement.WithAllocator(&cfg, f.allocate)
	g.Memory = cost.NewMemory()
	if _, _, err := placement.Place(ctx, cfg, snap, g); err != nil {
		t.Fatal(err)
	}
	first := f.calls
	_, u, err := placement.Place(ctx, cfg, snap, g)
	if err != nil || u == nil {
		t.Fatal(err)
	}
	if f.calls != first || u.Stats.Remembered == 0 || u.TimedOut != nil {
		t.Errorf("second attempt: %d more calls, %d remembered, TimedOut %+v; want none, all remembered, a plain refusal", f.calls-first, u.Stats.Remembered, u.TimedOut)
	}
	node := snap.Nodes()[0].Name()
	other, _, err := scenario.BuildGang(scenario.GangSpec{Name: "other", Pods: 1, GPUsPerPod: 1})
	if err != nil {
		t.Fatal(err)
	}
	taken := &placement.Decision{Pods: []placement.PodPlacement{{Namespace: scenario.Namespace, Name: "other-00", UID: other.Members[0].Pod.UID, Node: node}},
		Claims: []placement.ClaimAllocation{{Allocation: resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{
			{Request: "gpu", Driver: "gpufabric.dev", Pool: node, Device: "gpu-0"}}}}}}}
	if err := placement.Assume(ctx, snap, other, taken); err != nil {
		t.Fatal(err)
	}
	f.perNode = map[string]int{}
	if _, _, err := placement.Place(ctx, cfg, snap, g); err != nil {
		t.Fatal(err)
	}
	if len(f.perNode) != 1 || f.perNode[node] != 1 {
		t.Errorf("after %s changed: calls per node %v, want that node once", node, f.perNode)
	}
}

// TestTimedOutNamesClaimShort: the refusal names the claim by its
// namespace-local name, cut to cost.MaxNameLen runes.
func TestTimedOutNamesClaimShort(t *testing.T) {
	b, snap, g := costCluster(t)
	g.Members[0].Claims[0].Name = strings.Repeat("c", 253)
	f := newSlowAllocator(100*time.Millisecond, true)
	cfg := b.Config
	placement.WithAllocator(&cfg, f.allocate)
	_, u, err := placement.Place(context.Background(), cfg, snap, g)
	if err != nil || u == nil || u.TimedOut == nil {
		t.Fatalf("want a timed-out refusal: %v", err)
	}
	short := strings.Repeat("c", cost.MaxNameLen-1) + "…"
	if u.TimedOut.Blame.Claim != short || !strings.Contains(u.Message, `claim "`+short+`"`) || strings.Contains(u.Message, strings.Repeat("c", cost.MaxNameLen+1)) {
		t.Errorf("blamed %q, message %q; want the name cut to %d runes", u.TimedOut.Blame.Claim, u.Message, cost.MaxNameLen)
	}
	if strings.Contains(u.Message, scenario.Namespace+"/") {
		t.Errorf("message names the namespace: %q", u.Message)
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
