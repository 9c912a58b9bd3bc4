package assume

import (
	"github.com/gpufabric/gpufabric/pkg/gang/internal/objtest"
	"testing"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	corelisters "k8s.io/client-go/listers/core/v1"
	resourcelisters "k8s.io/client-go/listers/resource/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/gpufabric/gpufabric/pkg/gang/placement"
	"github.com/gpufabric/gpufabric/pkg/gang/placement/index"
)

// TestAssumeVisible: an assumed commit stays until the informers show its
// writes, and ends when its pods are bound, deleted or their node is gone,
// and when its claims reach the written resourceVersion, are deleted or
// replaced, even if they were deallocated before the informers caught up;
// and only once the placement cache, fed after the listers, has been given
// what the listers show.
func TestAssumeVisible(t *testing.T) {
	entry := &Entry{
		Parts: []Part{{Decision: &placement.Decision{
			Pods:   []placement.PodPlacement{{Namespace: "ns", Name: "p0", UID: "uid-p0", Node: "node-a"}},
			Claims: []placement.ClaimAllocation{{Namespace: "ns", Name: "c0", UID: "uid-c0"}},
		}}},
		Written: map[types.UID]string{"uid-c0": "100"},
	}
	unboundPod := objtest.Pod("p0")
	unboundPod.ResourceVersion = "90"
	boundPod := objtest.Pod("p0")
	boundPod.Spec.NodeName, boundPod.ResourceVersion = "node-a", "101"
	node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}}
	claimAt := func(rv string, allocated bool) *resourceapi.ResourceClaim {
		c := objtest.Claim("c0", allocated)
		c.ResourceVersion = rv
		return c
	}
	tests := []struct {
		name    string
		objects []any
		// cached: what the placement cache was given (default: objects).
		cached []any
		want   bool
	}{
		{"nothing visible yet", []any{unboundPod, node, claimAt("99", false)}, nil, false},
		{"claim visible, pod not bound yet", []any{unboundPod, node, claimAt("100", true)}, nil, false},
		{"pod bound, claim not visible yet", []any{boundPod, node, claimAt("99", false)}, nil, false},
		{"all visible", []any{boundPod, node, claimAt("100", true)}, nil, true},
		{"claim deallocated after the write", []any{boundPod, node, claimAt("120", false)}, nil, true},
		{"claim deleted", []any{boundPod, node}, nil, true},
		{"claim replaced", []any{boundPod, node, func() *resourceapi.ResourceClaim { c := claimAt("50", false); c.UID = "new"; return c }()}, nil, true},
		{"pod deleted", []any{node, claimAt("100", true)}, nil, true},
		{"node deleted", []any{unboundPod, claimAt("100", true)}, nil, true},
		{"unparsable resourceVersion, allocated", []any{boundPod, node, claimAt("x", true)}, nil, true},
		{"unparsable resourceVersion, not allocated", []any{boundPod, node, claimAt("x", false)}, nil, false},
		{"all visible, the cache behind on the claim", []any{boundPod, node, claimAt("100", true)}, []any{boundPod, claimAt("99", false)}, false},
		{"all visible, the cache behind on the pod", []any{boundPod, node, claimAt("100", true)}, []any{unboundPod, claimAt("100", true)}, false},
		{"all visible, the cache never given the claim", []any{boundPod, node, claimAt("100", true)}, []any{boundPod}, false},
		{"claim deleted, the cache behind", []any{boundPod, node}, []any{boundPod, claimAt("100", true)}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pods := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
			claims := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
			nodes := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
			for _, o := range tt.objects {
				var err error
				switch o := o.(type) {
				case *v1.Pod:
					err = pods.Add(o)
				case *resourceapi.ResourceClaim:
					err = claims.Add(o)
				case *v1.Node:
					err = nodes.Add(o)
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			pc := index.NewCache(index.Config{})
			cached := tt.cached
			if cached == nil {
				cached = tt.objects
			}
			for _, o := range cached {
				switch o := o.(type) {
				case *v1.Pod:
					pc.SetPod(o)
				case *resourceapi.ResourceClaim:
					pc.SetClaim(o)
				}
			}
			sh := &Shown{
				Pods:   corelisters.NewPodLister(pods),
				Claims: resourcelisters.NewResourceClaimLister(claims),
				Nodes:  corelisters.NewNodeLister(nodes),
				Cache:  pc,
			}
			if got := sh.Visible(entry); got != tt.want {
				t.Errorf("visible = %v, want %v", got, tt.want)
			}
		})
	}
}

// TestAssumeInFlight: an entry in flight is never dropped by what the
// informers show; once completed it ends by the visibility rules; a failed
// commit's entry is dropped.
func TestAssumeInFlight(t *testing.T) {
	a := New()
	always := func(*Entry) bool { return true }
	a.AddInFlight("ns/g")
	if !a.Waiting("ns/g", always) || len(a.Pending(always)) != 1 {
		t.Fatal("an entry in flight was dropped as visible")
	}
	a.Complete("ns/g", nil)
	if a.Waiting("ns/g", always) || a.Len() != 0 {
		t.Fatal("a completed entry the informers show was kept")
	}
	a.AddInFlight("ns/h")
	a.Drop("ns/h")
	if a.Len() != 0 {
		t.Fatal("a dropped entry was kept")
	}
}
