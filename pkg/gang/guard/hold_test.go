package guard

import (
	"fmt"
	"github.com/gpufabric/gpufabric/pkg/gang/internal/objtest"
	"github.com/gpufabric/gpufabric/pkg/gang/vocab"
	"testing"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	resourcelisters "k8s.io/client-go/listers/resource/v1"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
)

// TestHoldLifecycle: a claim that gives up a device another claim still
// holds makes a hold for that other claim (its spec and allocation); the
// hold goes when the claim it is for is deallocated, and the hold's own
// deletion makes a hold for a claim given the device meanwhile.
func TestHoldLifecycle(t *testing.T) {
	ctx := t.Context()
	const ns = "gpufabric-system"
	client := fake.NewClientset()
	generated := 0
	client.PrependReactor("create", "resourceclaims", func(a k8stesting.Action) (bool, runtime.Object, error) {
		c := a.(k8stesting.CreateAction).GetObject().(*resourceapi.ResourceClaim)
		if c.Name == "" && c.GenerateName != "" { // the fake does not generate names
			generated++
			c.Name = fmt.Sprintf("%s%d", c.GenerateName, generated)
		}
		return false, nil, nil
	})
	indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	g := New(Config{Client: client, RecordNamespace: ns, Claims: resourcelisters.NewResourceClaimLister(indexer)})
	g.synced.Store(true)
	event := func(old, c *resourceapi.ResourceClaim) {
		t.Helper()
		if c != nil {
			if err := indexer.Add(c); err != nil {
				t.Fatal(err)
			}
		} else if err := indexer.Delete(old); err != nil {
			t.Fatal(err)
		}
		g.claimChanged(old, c)
	}
	sync := func(uid types.UID) {
		t.Helper()
		if err := g.syncHolds(ctx, uid); err != nil {
			t.Fatalf("sync holds of %s: %v", uid, err)
		}
	}
	holds := func() map[string][]string { // hold name -> held-for UID, devices
		t.Helper()
		list, err := client.ResourceV1().ResourceClaims(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		out := map[string][]string{}
		for _, h := range list.Items {
			out[h.Name] = []string{h.Labels[vocab.HoldLabel], h.Annotations[vocab.HoldForAnnotation]}
			if h.Status.Allocation != nil {
				for _, d := range allocatedDevices(&h) {
					out[h.Name] = append(out[h.Name], d.String())
				}
			}
		}
		return out
	}

	kept, lost := allocated("kept", "gpu-0", "gpu-1"), allocated("lost", "gpu-1")
	event(nil, kept)
	event(nil, lost)
	event(lost, nil) // the repair's loser goes: kube-scheduler forgets gpu-1
	if !g.holds.want[kept.UID] {
		t.Fatalf("no hold wanted for the kept claim: %v", g.holds.want)
	}
	sync(kept.UID)
	got := holds()
	if len(got) != 1 {
		t.Fatalf("holds %v, want one", got)
	}
	var holdName string
	for name := range got {
		holdName = name
	}
	want := []string{string(kept.UID), "ns/kept", "gpufabric.dev/node-a/gpu-0", "gpufabric.dev/node-a/gpu-1"}
	if diff := cmp.Diff(want, got[holdName]); diff != "" {
		t.Errorf("hold (-want +got):\n%s", diff)
	}
	hold, err := client.ResourceV1().ResourceClaims(ns).Get(ctx, holdName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !IsHold(hold, ns) {
		t.Fatalf("hold %s not recognized as one", holdName)
	}
	event(nil, hold)
	sync(kept.UID) // nothing forgotten since: no second hold
	if n := len(holds()); n != 1 {
		t.Errorf("%d holds after a sync with nothing forgotten, want 1", n)
	}

	// The kept claim is deallocated and gpu-1 given to another claim before
	// the hold is deleted: the deletion makes kube-scheduler forget gpu-1
	// again, so the new holder gets a hold.
	event(kept, objtest.Claim("kept", false))
	next := allocated("next", "gpu-1")
	event(nil, next)
	sync(kept.UID)
	if got := holds(); len(got) != 0 {
		t.Fatalf("holds %v after the kept claim was deallocated, want none", got)
	}
	event(hold, nil)
	if !g.holds.want[next.UID] {
		t.Fatalf("no hold wanted for the claim given gpu-1: %v", g.holds.want)
	}
	sync(next.UID)
	got = holds()
	if len(got) != 1 {
		t.Fatalf("holds %v, want one for %s", got, next.Name)
	}
	for _, h := range got {
		if h[0] != string(next.UID) {
			t.Errorf("hold for %s, want %s", h[0], next.UID)
		}
	}
}
