package placement_test

import (
	"context"
	"strings"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/cel"

	"github.com/gpufabric/gpufabric/pkg/gang/placement"
	"github.com/gpufabric/gpufabric/pkg/gang/placement/cost"
	"github.com/gpufabric/gpufabric/pkg/gang/placement/index"
)

// slowSelector is a valid CEL device selector (its estimated cost is under
// the API's limit, resourceapi.CELSelectorExpressionMaxCost) that costs
// the allocator n³ string operations per device; with tail it is false
// for GPUs, so the claim is refused after the work.
func slowSelector(t *testing.T, n int, tail string) resourceapi.DeviceSelector {
	l := "[" + strings.TrimSuffix(strings.Repeat("1,", n), ",") + "]"
	expr := l + `.all(i, ` + l + `.all(j, ` + l + `.all(k, device.attributes["gpufabric.dev"].nvlinkDomain.lowerAscii() != "zz")))` + tail
	c := cel.GetCompiler(cel.Features{}).CompileCELExpression(expr, cel.Options{})
	if c.Error != nil || c.MaxCost > resourceapi.CELSelectorExpressionMaxCost {
		t.Fatalf("selector not valid: %v, estimated cost %d", c.Error, c.MaxCost)
	}
	return resourceapi.DeviceSelector{CEL: &resourceapi.CELDeviceSelector{Expression: expr}}
}

// TestSlowSelectorsThroughTheAllocator: the real structured allocator
// with a claim of 32 slow but valid selectors. When its calls run out of
// index.Config.AllocateTimeout, the gang makes two calls for the one
// device shape of the cluster (cost.TimedOutConfirmations), not one per
// node and level, and is refused as timed out, naming the claim; when they finish but are refused, the
// call budget stops the attempt.
func TestSlowSelectorsThroughTheAllocator(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name      string
		timeout   time.Duration
		tail      string
		n         int
		budget    cost.Budget
		wantCalls int
		wantStart string
	}{
		{"calls run out of time", time.Millisecond, "", 10, cost.Budget{}, cost.TimedOutConfirmations, `timed out: allocator calls ran out of time; claim "slow-00-gpu"`},
		{"slow refusals, call budget", time.Minute, ` && device.attributes["gpufabric.dev"].type == "nic"`, 6, cost.Budget{Calls: 2}, 2 + cost.CallsPerMember,
			`timed out: the attempt stopped after 10 allocator calls (its budget); claim "slow-00-gpu"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, _, g := costCluster(t)
			req := &g.Members[0].Claims[0].Spec.Devices.Requests[0]
			for range 32 {
				req.Exactly.Selectors = append(req.Exactly.Selectors, slowSelector(t, tc.n, tc.tail))
			}
			cfg := b.Config
			cfg.Index.AllocateTimeout = tc.timeout
			cfg.Budget = tc.budget
			snap, err := index.NewSnapshot(ctx, cfg.Index, b.Input)
			if err != nil {
				t.Fatal(err)
			}
			d, u, err := placement.Place(ctx, cfg, snap, g)
			if err != nil || d != nil || u == nil {
				t.Fatalf("want a refusal: %v %v", err, d)
			}
			if u.Stats.AllocateCalls != tc.wantCalls {
				t.Errorf("%d allocator calls, want %d (64 nodes at 4 levels without the bound)", u.Stats.AllocateCalls, tc.wantCalls)
			}
			if !strings.HasPrefix(u.Message, tc.wantStart) {
				t.Errorf("message %q, want it to start with %q", u.Message, tc.wantStart)
			}
		})
	}
}
