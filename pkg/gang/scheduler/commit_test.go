package scheduler

import (
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpufabric/gpufabric/pkg/gang/placement"
)

func claim(name string, allocated bool, reservedFor ...types.UID) *resourceapi.ResourceClaim {
	c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name)}}
	if allocated {
		c.Status.Allocation = &resourceapi.AllocationResult{}
	}
	for _, u := range reservedFor {
		c.Status.ReservedFor = append(c.Status.ReservedFor, resourceapi.ResourceClaimConsumerReference{UID: u})
	}
	return c
}

func pod(name string) *v1.Pod {
	return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name)}}
}

// TestPlanWrites: shared claims first (reserved for the PodGroup), then each
// member's; allocated claims only get a missing reservation.
func TestPlanWrites(t *testing.T) {
	pg := &schedulingv1beta1.PodGroup{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "pg", UID: "uid-pg"}}
	g := &placement.Gang{
		SharedClaims: []*resourceapi.ResourceClaim{claim("fabric", false), claim("done", true, "uid-pg")},
		Members: []placement.Member{
			{Pod: pod("p0"), Claims: []*resourceapi.ResourceClaim{claim("p0-gpus", false), claim("user", true, "uid-other")}},
			{Pod: pod("p1"), Claims: []*resourceapi.ResourceClaim{claim("p1-gpus", false)}},
		},
	}
	d := &placement.Decision{Claims: []placement.ClaimAllocation{{Name: "fabric", Shared: true}, {Name: "p0-gpus"}, {Name: "p1-gpus"}}}
	var got []string
	for _, w := range planWrites(pg, g, d) {
		got = append(got, fmt.Sprintf("%s alloc=%v for=%s/%s", w.claim.Name, w.alloc != nil, w.consumer.Resource, w.consumer.Name))
	}
	want := []string{
		"fabric alloc=true for=podgroups/pg",
		"p0-gpus alloc=true for=pods/p0",
		"user alloc=false for=pods/p0",
		"p1-gpus alloc=true for=pods/p1",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("writes (-want +got):\n%s", diff)
	}
}
