package commit

import (
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"testing"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/gpufabric/gpufabric/pkg/gang/gate"
	"github.com/gpufabric/gpufabric/pkg/gang/internal/objtest"
	"github.com/gpufabric/gpufabric/pkg/gang/placement"
	"github.com/gpufabric/gpufabric/pkg/gang/placement/extended"
)

// TestCommitWritesExtendedStatus: a gang of one with extended resources
// backed by DRA gets its special claim allocated and reserved, then its
// status.extendedResourceClaimStatus (with its UID in the patch), then
// its binding, in that order; a pod whose status already says so gets no
// status write.
func TestCommitWritesExtendedStatus(t *testing.T) {
	status := v1.PodExtendedResourceClaimStatus{ResourceClaimName: "p-extended-resources-bcdfg",
		RequestMappings: []v1.ContainerExtendedResourceRequest{{ContainerName: "train", ResourceName: "nvidia.com/gpu", RequestName: "container-0-request-0"}}}
	for _, written := range []bool{false, true} {
		p, c := objtest.Pod("p"), objtest.Claim("p-extended-resources-bcdfg", false)
		if written {
			p.Status.ExtendedResourceClaimStatus = status.DeepCopy()
		}
		g := &placement.Gang{Namespace: "ns", Name: "p", UID: p.UID, Members: []placement.Member{{Pod: p, Claims: []*resourceapi.ResourceClaim{c},
			Extended: &extended.Resources{Pod: "p", Claim: c, Status: status}}}}
		d := &placement.Decision{Gang: "ns/p", Pods: []placement.PodPlacement{{Namespace: "ns", Name: "p", UID: p.UID, Node: "n"}},
			Claims: []placement.ClaimAllocation{{Namespace: "ns", Name: c.Name, UID: c.UID, Pod: "p"}}}
		client := fake.NewClientset([]runtime.Object{p, c}...)
		client.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
			return a.GetSubresource() == "binding", nil, nil
		})
		var mu sync.Mutex
		var steps []string
		hook := func(step gate.Step, object string) error {
			mu.Lock()
			defer mu.Unlock()
			steps = append(steps, string(step))
			return nil
		}
		cm := New(Config{Client: client, RecordNamespace: "gpufabric-system", Parallelism: 2, Gate: &gate.Gate{Hook: hook}})
		if err := cm.Begin(nil, g, d).Run(t.Context()); err != nil {
			t.Fatalf("commit: %v", err)
		}
		want := []string{"claim-finalizer", "claim-status", "pod-status", "bind", "done"}
		if written {
			want = slices.DeleteFunc(want, func(s string) bool { return s == "pod-status" })
		}
		if strings.Join(steps, ",") != strings.Join(want, ",") {
			t.Errorf("written=%v: steps %v, want %v", written, steps, want)
		}
		if written {
			continue
		}
		var patch map[string]any
		for _, a := range client.Actions() {
			if pa, ok := a.(k8stesting.PatchAction); ok && pa.GetSubresource() == "status" {
				if err := json.Unmarshal(pa.GetPatch(), &patch); err != nil {
					t.Fatal(err)
				}
			}
		}
		got, err := client.CoreV1().Pods("ns").Get(t.Context(), "p", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got.Status.ExtendedResourceClaimStatus == nil || got.Status.ExtendedResourceClaimStatus.ResourceClaimName != status.ResourceClaimName ||
			len(got.Status.ExtendedResourceClaimStatus.RequestMappings) != 1 {
			t.Errorf("pod status %+v, want %+v", got.Status.ExtendedResourceClaimStatus, status)
		}
		if meta, _ := patch["metadata"].(map[string]any); meta["uid"] != string(p.UID) {
			t.Errorf("status patch %v does not carry the pod's UID", patch)
		}
	}
}
