package scheduler

import (
	"slices"
	"testing"

	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
)

// TestChainFirst: a first handler runs before the queue's handler of its
// informer, in one handler, for adds, updates and deletes; one whose
// informer has no queue handler is added alone; other handlers are kept.
func TestChainFirst(t *testing.T) {
	factory := informers.NewSharedInformerFactory(fake.NewClientset(), 0)
	pods, claims, nodes := factory.Core().V1().Pods().Informer(), factory.Resource().V1().ResourceClaims().Informer(), factory.Core().V1().Nodes().Informer()
	var calls []string
	rec := func(name string) cache.ResourceEventHandlerFuncs {
		return cache.ResourceEventHandlerFuncs{
			AddFunc:    func(any) { calls = append(calls, name+" add") },
			UpdateFunc: func(any, any) { calls = append(calls, name+" update") },
			DeleteFunc: func(any) { calls = append(calls, name+" delete") },
		}
	}
	out := chainFirst(
		[]informerHandler{{pods, rec("cache")}, {nodes, rec("cache-nodes")}},
		[]informerHandler{{pods, rec("queue")}, {pods, rec("bump")}, {claims, rec("queue-claims")}})
	if len(out) != 4 || out[0].inf != pods || out[1].inf != pods || out[2].inf != claims || out[3].inf != nodes {
		t.Fatalf("handlers %d: %+v", len(out), out)
	}
	out[0].h.OnAdd(nil, false)
	out[0].h.OnUpdate(nil, nil)
	out[0].h.OnDelete(nil)
	want := []string{"cache add", "queue add", "cache update", "queue update", "cache delete", "queue delete"}
	if !slices.Equal(calls, want) {
		t.Errorf("calls %q, want %q", calls, want)
	}
	calls = nil
	out[1].h.OnAdd(nil, false)
	out[3].h.OnAdd(nil, false)
	if want := []string{"bump add", "cache-nodes add"}; !slices.Equal(calls, want) {
		t.Errorf("calls %q, want %q", calls, want)
	}
}
