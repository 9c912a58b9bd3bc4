package scheduler

import (
	"context"
	"testing"
	"time"

	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
)

// TestUnsynced: before the informers start every one is named (twelve
// APIs, the PodGroup one by its group and version); once synced none is.
func TestUnsynced(t *testing.T) {
	factory := informers.NewSharedInformerFactory(fake.NewClientset(), 0)
	s, err := newInformerSet(factory, false)
	if err != nil {
		t.Fatal(err)
	}
	got := s.unsynced()
	if len(got) != 12 || got[1] != "podgroups.v1beta1.scheduling.k8s.io" {
		t.Errorf("before start: %v", got)
	}
	ctx, cancel := context.WithCancel(t.Context())
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	defer cancel()
	if !cache.WaitForCacheSync(ctx.Done(), s.synced()...) {
		t.Fatal("informers did not sync")
	}
	deadline := time.Now().Add(5 * time.Second)
	for len(s.unsynced()) > 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if got := s.unsynced(); len(got) > 0 {
		t.Errorf("after sync: %v", got)
	}
}
