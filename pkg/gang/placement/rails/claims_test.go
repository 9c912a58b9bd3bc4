package rails

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func gpuClaim(count int64) *resourceapi.ResourceClaim {
	return &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c"},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
			Name:    "gpu",
			Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "gpu", AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: count},
		}}}},
	}
}

// resultsFor is an allocation naming each request of c once.
func resultsFor(c *resourceapi.ResourceClaim) []resourceapi.AllocationResult {
	var res resourceapi.AllocationResult
	for _, r := range c.Spec.Devices.Requests {
		res.Devices.Results = append(res.Devices.Results, resourceapi.DeviceRequestAllocationResult{Request: r.Name})
	}
	return []resourceapi.AllocationResult{res}
}

func requestsOf(res []resourceapi.AllocationResult) []string {
	var out []string
	for _, r := range res[0].Devices.Results {
		out = append(out, r.Request)
	}
	return out
}

// TestUnsplitAcrossCopies: a claim split by one Copies is renamed back by
// any other, after a DeepCopy, and after being limited again (a coupled
// role's claims limited to its set, then to a set the engine tries); a
// claim never split is left as it is.
func TestUnsplitAcrossCopies(t *testing.T) {
	orig := gpuClaim(4)
	first := NewCopies("gpu").Limit([]*resourceapi.ResourceClaim{orig}, []int64{4, 5, 6, 7}, true)
	if n := len(first[0].Spec.Devices.Requests); n != 4 {
		t.Fatalf("split into %d requests, want 4", n)
	}
	again := NewCopies("gpu").Limit(first, []int64{4, 5}, true)
	tests := map[string]struct {
		claims []*resourceapi.ResourceClaim
		want   []string
	}{
		"the split copy":          {claims: first, want: []string{"gpu", "gpu", "gpu", "gpu"}},
		"a DeepCopy of it":        {claims: []*resourceapi.ResourceClaim{first[0].DeepCopy()}, want: []string{"gpu", "gpu", "gpu", "gpu"}},
		"limited again":           {claims: again, want: []string{"gpu", "gpu", "gpu", "gpu"}},
		"never split":             {claims: []*resourceapi.ResourceClaim{orig}, want: []string{"gpu"}},
		"limited without a split": {claims: NewCopies("gpu").Limit([]*resourceapi.ResourceClaim{gpuClaim(1)}, []int64{4, 5}, true), want: []string{"gpu"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := requestsOf(NewCopies("gpu").Unsplit(tc.claims, resultsFor(tc.claims[0])))
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("requests (-want +got):\n%s", diff)
			}
		})
	}
	if _, ok := orig.Annotations[splitAnnotation]; ok {
		t.Errorf("the original claim was changed: %v", orig.Annotations)
	}
}
