package guard

import (
	"context"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/events"

	"github.com/gpufabric/gpufabric/pkg/gang/report"
)

type nopReleaser struct{}

func (nopReleaser) ReleaseClaim(context.Context, string, string, types.UID, map[types.UID]bool) error {
	return nil
}

// TestDoubleBookingNamesNoOtherNamespace: a claim of tenant-b that loses a
// device to a claim of tenant-a is told so (on the claim and on its pod)
// without tenant-a's namespace or claim name; a keeper of the same
// namespace is named.
func TestDoubleBookingNamesNoOtherNamespace(t *testing.T) {
	for _, keeperNS := range []string{"tenant-a", "tenant-b"} {
		client := fake.NewClientset()
		client.PrependReactor("create", "pods", func(act k8stesting.Action) (bool, runtime.Object, error) {
			return act.GetSubresource() == "eviction", nil, nil
		})
		rec := events.NewFakeRecorder(10)
		g := New(Config{Client: client, Report: report.New(rec), Releaser: nopReleaser{}})
		claim := func(ns, name string) *resourceapi.ResourceClaim {
			return &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(ns + name)}}
		}
		pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "tenant-b", Name: "loser-0", UID: "p"}}
		lose := &claimUse{claim: claim("tenant-b", "loser"), pods: []*v1.Pod{pod}}
		keep := &claimUse{claim: claim(keeperNS, "secret-claim")}
		if err := g.free(t.Context(), deviceKey{"gpufabric.dev", "node-a", "gpu-0"}, lose, keep); err != nil {
			t.Fatal(err)
		}
		if len(rec.Events) != 2 {
			t.Fatalf("%d events, want one on the pod and one on the claim", len(rec.Events))
		}
		for range 2 {
			note := <-rec.Events
			named := strings.Contains(note, "secret-claim")
			if keeperNS == "tenant-a" && (named || strings.Contains(note, "tenant-a")) {
				t.Errorf("tenant-b is told about tenant-a's claim: %s", note)
			}
			if keeperNS == "tenant-b" && !strings.Contains(note, "claim tenant-b/secret-claim") {
				t.Errorf("a keeper of the same namespace is not named: %s", note)
			}
		}
	}
}
