package placement

import (
	"context"
	"errors"
	"strconv"
	"strings"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/gpufabric/gpufabric/pkg/gang/placement/cost"
	"github.com/gpufabric/gpufabric/pkg/gang/placement/index"
	"github.com/gpufabric/gpufabric/pkg/gang/placement/rails"
)

// Every Allocate call of a Place goes through the allocator, which keeps
// the attempt inside its budget and out of the calls the gang already
// paid for (pkg/gang/placement/cost, docs/design/cost.md):
//   - before a call, the gang's Memory is asked: a refusal remembered for
//     the same claims on a node with the same free devices, or a timeout
//     remembered for the same claims on a node of the same device shapes,
//     answers without a call (Stats.Remembered);
//   - a call is made only while the Meter allows it (Config.Budget: a call
//     count, and a deadline compared with the allocator's end times);
//     once it does not, the Place call ends with errBudget, which Place
//     turns into an Unschedulable that says "timed out";
//   - after a call, a refusal or a timeout is remembered, and its time is
//     charged to the call's heaviest claim (cost.Weight), the one the
//     refusal names.

// errBudget ends a Place call whose budget is spent.
var errBudget = errors.New("placement budget spent")

// allocFunc is the seam to the structured allocator:
// index.Snapshot.Allocate, or a test's fake (export_test.go).
type allocFunc func(ctx context.Context, ns *index.NodeState, claims []*resourceapi.ResourceClaim, classes []string, inflight index.InFlight) (index.Allocation, error)

// allocator runs one Place call's Allocate calls, counting them in its
// Stats and its Meter, through the gang's Memory (see above).
type allocator struct {
	call  allocFunc
	stats *Stats
	meter *cost.Meter
	mem   *cost.Memory
	keys  *callKeys
}

var _ rails.Allocator = allocator{}

// Allocate is allocate, for the rail searches.
func (a allocator) Allocate(ctx context.Context, ns *index.NodeState, claims []*resourceapi.ResourceClaim, classes []string,
	inflight index.InFlight) ([]resourceapi.AllocationResult, string, error) {
	return a.allocate(ctx, ns, claims, classes, inflight)
}

// allocate returns the claims' results on the node next to inflight, or
// nil and the failed check when they do not fit or ran out of time;
// errBudget once the budget is spent.
func (a allocator) allocate(ctx context.Context, ns *index.NodeState, claims []*resourceapi.ResourceClaim, classes []string, inflight index.InFlight) ([]resourceapi.AllocationResult, string, error) {
	if a.mem.Len() > 0 {
		v, claim, err := a.remembered(ctx, ns, claims, classes, inflight)
		if err != nil {
			return nil, "", err
		}
		if v != cost.Unknown {
			a.stats.Remembered++
			a.meter.Remembered(claim, v)
			return nil, checkOf(v), nil
		}
	}
	if !a.meter.Allow() {
		return nil, "", errBudget
	}
	res, err := a.call(ctx, ns, claims, classes, inflight)
	if err != nil {
		return nil, "", err
	}
	a.stats.record(res.Took)
	claim := a.keys.heaviest(claims)
	a.meter.Record(claim, res.Took, res.End, res.TimedOut)
	switch {
	case res.TimedOut:
		a.stats.TimedOutCalls++
		return nil, CheckAllocatorTime, a.remember(ctx, ns, claims, classes, inflight, cost.TimedOut, claim)
	case res.Results == nil:
		return nil, CheckAllocator, a.remember(ctx, ns, claims, classes, inflight, cost.Refused, claim)
	}
	return res.Results, "", nil
}

func checkOf(v cost.Verdict) string {
	if v == cost.TimedOut {
		return CheckAllocatorTime
	}
	return CheckAllocator
}

// remembered returns the Memory's verdict for the call: a timeout on the
// node's shape first, then a refusal on its free devices.
func (a allocator) remembered(ctx context.Context, ns *index.NodeState, claims []*resourceapi.ResourceClaim, classes []string, inflight index.InFlight) (cost.Verdict, string, error) {
	for _, v := range []cost.Verdict{cost.TimedOut, cost.Refused} {
		k, ok, err := a.keys.key(ctx, v, ns, claims, classes, inflight)
		if err != nil || !ok {
			if err != nil {
				return cost.Unknown, "", err
			}
			continue
		}
		if got, claim := a.mem.Lookup(k); got == v {
			return v, claim, nil
		}
	}
	return cost.Unknown, "", nil
}

// remember records the call's verdict in the gang's Memory.
func (a allocator) remember(ctx context.Context, ns *index.NodeState, claims []*resourceapi.ResourceClaim, classes []string, inflight index.InFlight, v cost.Verdict, claim string) error {
	k, ok, err := a.keys.key(ctx, v, ns, claims, classes, inflight)
	if err != nil || !ok {
		return err
	}
	a.mem.Record(k, v, claim)
	return nil
}

// callKeys makes one Place call's Memory keys: the claims by digest
// (cached per claim object), the node by free devices (index.FreeDeviceKey,
// without the gang's own devices in flight there) or by device shapes
// (index.ShapeKey), cached per node and classes while the gang holds
// nothing on the node.
type callKeys struct {
	s       *index.Snapshot
	digests map[*resourceapi.ResourceClaim]string
	weights map[*resourceapi.ResourceClaim]int
	nodes   map[string]string // verdict|node index|classes → node key
}

func newCallKeys(s *index.Snapshot) *callKeys {
	return &callKeys{s: s, digests: map[*resourceapi.ResourceClaim]string{}, weights: map[*resourceapi.ResourceClaim]int{}, nodes: map[string]string{}}
}

// key returns the Memory key of a call for verdict v; ok false when the
// node's answer cannot be told from its own devices (FreeDeviceKey "").
func (k *callKeys) key(ctx context.Context, v cost.Verdict, ns *index.NodeState, claims []*resourceapi.ResourceClaim, classes []string, inflight index.InFlight) (cost.Key, bool, error) {
	node, err := k.nodeKey(ctx, v, ns, classes, inflight)
	if err != nil || node == "" {
		return cost.Key{}, false, err
	}
	parts := make([]string, 0, len(claims)+len(classes)+2)
	parts = append(parts, strconv.Itoa(int(v)), node)
	for _, c := range claims {
		d, ok := k.digests[c]
		if !ok {
			if d, err = cost.ClaimDigest(c); err != nil {
				return cost.Key{}, false, err
			}
			k.digests[c] = d
		}
		parts = append(parts, d)
	}
	parts = append(parts, classes...)
	return cost.KeyOf(parts...), true, nil
}

func (k *callKeys) nodeKey(ctx context.Context, v cost.Verdict, ns *index.NodeState, classes []string, inflight index.InFlight) (string, error) {
	if v == cost.TimedOut {
		// The gang's devices in flight make a call cheaper, never dearer.
		return k.cached(strconv.Itoa(ns.Index())+"|t|"+strings.Join(classes, ","), func() (string, error) { return k.s.ShapeKey(ctx, ns, classes) })
	}
	taken := inflight.OnNode(ns)
	if taken.Len() > 0 {
		return k.s.FreeDeviceKey(ctx, ns, classes, taken)
	}
	return k.cached(strconv.Itoa(ns.Index())+"|r|"+strings.Join(classes, ","), func() (string, error) { return k.s.FreeDeviceKey(ctx, ns, classes, nil) })
}

func (k *callKeys) cached(id string, f func() (string, error)) (string, error) {
	if v, ok := k.nodes[id]; ok {
		return v, nil
	}
	v, err := f()
	if err == nil {
		k.nodes[id] = v
	}
	return v, err
}

// heaviest returns the short name of the claim with the most cost.Weight
// (the first on ties), with the weights cached per claim object.
func (k *callKeys) heaviest(claims []*resourceapi.ResourceClaim) string {
	var best *resourceapi.ResourceClaim
	bw := -1
	for _, c := range claims {
		w, ok := k.weights[c]
		if !ok {
			w = cost.Weight(c)
			k.weights[c] = w
		}
		if w > bw {
			best, bw = c, w
		}
	}
	if best == nil {
		return ""
	}
	return cost.ShortName(best.Name)
}

// newAllocator makes one Place call's allocator: the seam (Config's fake,
// or the snapshot's Allocate), the Meter of Config.Budget, and the gang's
// Memory (a fresh one when it has none) begun on the snapshot.
func newAllocator(cfg Config, s *index.Snapshot, g *Gang, stats *Stats) (allocator, error) {
	call := cfg.allocate
	if call == nil {
		call = s.Allocate
	}
	mem := g.Memory
	if mem == nil {
		mem = cost.NewMemory()
	}
	env, err := s.AllocatorKey()
	if err != nil {
		return allocator{}, err
	}
	mem.Begin(env)
	return allocator{call: call, stats: stats, meter: cfg.Budget.Meter(len(g.Members)), mem: mem, keys: newCallKeys(s)}, nil
}
