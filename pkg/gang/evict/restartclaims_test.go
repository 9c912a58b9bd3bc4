package evict

import (
	"fmt"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	resourcelisters "k8s.io/client-go/listers/resource/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/gpufabric/gpufabric/pkg/gang/vocab"
)

// TestRestartWaitsForOldClaims: once a whole-gang restart's old members
// are gone, the restart still goes while a claim those members owned (from
// a template, or their extended resources') has devices allocated; it
// ends when they are released, or ClaimRelease after the members went,
// whatever the claims do.
func TestRestartWaitsForOldClaims(t *testing.T) {
	for _, tc := range []struct {
		name    string
		release func(idx cache.Indexer) // nil: never
	}{
		{"released", func(idx cache.Indexer) {
			deallocated := claim("train-0-gpu", false)
			if err := idx.Update(deallocated); err != nil {
				t.Fatal(err)
			}
			if err := idx.Delete(claim("train-1-ext", true)); err != nil {
				t.Fatal(err)
			}
		}},
		{"bounded", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newRestartFixture(t)
			f.refuse = false
			idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
			for _, c := range []*resourceapi.ResourceClaim{claim("train-0-gpu", true), claim("train-1-ext", true), claim("other", true)} {
				if err := idx.Add(c); err != nil {
					t.Fatal(err)
				}
			}
			f.r.cfg.Claims = resourcelisters.NewResourceClaimLister(idx)
			gangs := f.r.cfg.Gangs.(*fakeGangs)
			gangs.pods[0].Status.ResourceClaimStatuses = []v1.PodResourceClaimStatus{{Name: "gpu", ResourceClaimName: ptr.To("train-0-gpu")}}
			gangs.pods[1].Status.ExtendedResourceClaimStatus = &v1.PodExtendedResourceClaimStatus{ResourceClaimName: "train-1-ext"}
			f.turn(t) // evicts the old members, notes their claims
			gangs.pods = nil
			for i := range 3 {
				going, _, err := f.r.RestartGang(t.Context(), f.pg, 0, 0)
				if err != nil || !going {
					t.Fatalf("turn %d with the old claims allocated: going %v, err %v; want going", i, going, err)
				}
				f.clk.Step(time.Second)
			}
			if tc.release != nil {
				tc.release(idx)
			} else {
				f.clk.Step(ClaimRelease)
			}
			going, replaced, err := f.r.RestartGang(t.Context(), f.pg, 0, 0)
			if err != nil || going || !replaced {
				t.Fatalf("after: going %v, replaced %v, err %v; want the new gang placed", going, replaced, err)
			}
			if c := meta.FindStatusCondition(f.pg.Status.Conditions, "DisruptionTarget"); c == nil || c.Reason != vocab.ReasonReplacingMembers {
				t.Errorf("condition %+v, want ReplacingMembers", c)
			}
			if n := len(f.r.claims); n != 0 {
				t.Errorf("%d restarts' claims remembered after the end", n)
			}
		})
	}
}

// claim is an allocated (or not) claim of namespace ns.
func claim(name string, allocated bool) *resourceapi.ResourceClaim {
	c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}}
	if allocated {
		c.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{
			{Request: "gpu", Driver: "gpu.gpufabric.dev", Pool: "n1", Device: fmt.Sprintf("gpu-%s", name)}}}}
	}
	return c
}
