package extres

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	resourcelisters "k8s.io/client-go/listers/resource/v1"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"

	"github.com/gpufabric/gpufabric/pkg/gang/gate"
	"github.com/gpufabric/gpufabric/pkg/gang/placement"
)

// roomFor is the room over a fake client holding objects, with listers
// that show the claims and classes given.
func roomFor(t testing.TB, claims []*resourceapi.ResourceClaim, hook gate.Hook) (*Claims, *fake.Clientset) {
	t.Helper()
	var objects []runtime.Object
	claimIdx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	for _, c := range claims {
		objects = append(objects, c)
		if err := claimIdx.Add(c); err != nil {
			t.Fatal(err)
		}
	}
	classIdx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	for _, dc := range []*resourceapi.DeviceClass{class("gpu.gpufabric.dev", 1, "nvidia.com/gpu"), class("gpu.old.dev", 0, "")} {
		if err := classIdx.Add(dc); err != nil {
			t.Fatal(err)
		}
	}
	client := fake.NewClientset(objects...)
	return New(Config{Client: client, Claims: resourcelisters.NewResourceClaimLister(claimIdx),
		Classes: resourcelisters.NewDeviceClassLister(classIdx), Gate: &gate.Gate{Hook: hook}, Parallelism: 2}), client
}

func gangOf(pods ...*v1.Pod) *placement.Gang {
	g := &placement.Gang{Namespace: "ns", Name: "g"}
	for _, p := range pods {
		g.Members = append(g.Members, placement.Member{Pod: p})
	}
	return g
}

// writes lists the client's writes as "verb name".
func writes(client *fake.Clientset) []string {
	var out []string
	for _, a := range client.Actions() {
		switch a := a.(type) {
		case k8stesting.DeleteAction:
			out = append(out, "delete "+a.GetName())
		case k8stesting.CreateAction: // updates too
			out = append(out, a.GetVerb()+" "+a.GetObject().(metav1.Object).GetName())
		}
	}
	return out
}

// TestAttach: a member asking nvidia.com/gpu gets its special claim once
// the informers show it; until then the room creates it and the gang
// waits; a stale claim of the pod's is replaced; anything not the pod's,
// or a creation the apiserver refuses, refuses the gang with the reason
// and writes nothing more.
func TestAttach(t *testing.T) {
	p := podWith(nil, container("train", "nvidia.com/gpu", 4))
	r, err := RequestOf(p, NewClasses([]*resourceapi.DeviceClass{class("gpu.gpufabric.dev", 1, "nvidia.com/gpu")}))
	if err != nil {
		t.Fatal(err)
	}
	name := ClaimName(p)
	mine := NewClaim(p, r)
	mine.UID = "uid-claim"
	stale := mine.DeepCopy()
	stale.Spec.Devices.Requests[0].Exactly.DeviceClassName = "gpu.old.dev"
	stale.Finalizers = []string{resourceapi.Finalizer}
	staleShared := stale.DeepCopy()
	staleShared.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: "other", UID: "uid-other"}}
	squatter := mine.DeepCopy()
	squatter.Annotations = nil
	deleting := mine.DeepCopy()
	deleting.DeletionTimestamp = &metav1.Time{}
	forbidden := func(a k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Group: "resource.k8s.io", Resource: "resourceclaims"}, name, errors.New("exceeded quota: gpus"))
	}
	tests := map[string]struct {
		pod        *v1.Pod
		have       []*resourceapi.ResourceClaim
		reactor    k8stesting.ReactionFunc
		hook       gate.Hook
		wantErr    error
		wantMsg    string
		wantWrites []string
		attached   bool
	}{
		"no claim yet: created, the gang waits": {have: nil, wantErr: placement.ErrNotReady, wantMsg: "1 extended-resource claims created (first: ns/" + name, wantWrites: []string{"create " + name}},
		"the pod's claim: attached":             {have: []*resourceapi.ResourceClaim{mine}, attached: true},
		"pod asks for nothing DRA backs":        {pod: podWith(nil, container("train", "example.com/fpga", 1))},
		"a claim of its name that is not the pod's": {have: []*resourceapi.ResourceClaim{squatter}, wantErr: placement.ErrInvalid,
			wantMsg: "the name of its extended-resource claim, " + name + ", is taken by a ResourceClaim that is not the pod's"},
		"the pod's claim is being deleted": {have: []*resourceapi.ResourceClaim{deleting}, wantErr: placement.ErrNotReady, wantMsg: "is being deleted"},
		"stale claim: finalizer, delete, create": {have: []*resourceapi.ResourceClaim{stale}, wantErr: placement.ErrNotReady,
			wantWrites: []string{"update " + name, "delete " + name, "create " + name}},
		"stale claim reserved for another pod": {have: []*resourceapi.ResourceClaim{staleShared}, wantErr: placement.ErrInvalid, wantMsg: "is reserved for other consumers too"},
		"quota refuses the claim": {reactor: forbidden, wantErr: placement.ErrInvalid,
			wantMsg: "pod ns/p: creating its extended-resource claim " + name + " was refused: ", wantWrites: []string{"create " + name}},
		"a stopped scheduler writes nothing": {hook: func(gate.Step, string) error { return errors.New("killed") }, wantErr: gate.ErrAborted},
	}
	for tn, tc := range tests {
		t.Run(tn, func(t *testing.T) {
			room, client := roomFor(t, tc.have, tc.hook)
			if tc.reactor != nil {
				client.PrependReactor("create", "resourceclaims", tc.reactor)
			}
			pod := p
			if tc.pod != nil {
				pod = tc.pod
			}
			g := gangOf(pod)
			err := room.Attach(t.Context(), g)
			if tc.wantErr == nil && err != nil || tc.wantErr != nil && !errors.Is(err, tc.wantErr) || !strings.Contains(fmt.Sprint(err), tc.wantMsg) {
				t.Fatalf("Attach: %v, want %v with %q", err, tc.wantErr, tc.wantMsg)
			}
			if got := writes(client); strings.Join(got, ";") != strings.Join(tc.wantWrites, ";") {
				t.Errorf("writes %q, want %q", got, tc.wantWrites)
			}
			m := g.Members[0]
			if !tc.attached {
				if m.Extended != nil || len(m.Claims) > 0 {
					t.Errorf("member got %+v and claims %d, want nothing", m.Extended, len(m.Claims))
				}
				return
			}
			if len(m.Claims) != 1 || m.Claims[0].UID != mine.UID || m.Extended == nil || m.Extended.Claim != m.Claims[0] {
				t.Fatalf("member claims %v, extended %+v; want the pod's claim", m.Claims, m.Extended)
			}
			want := v1.PodExtendedResourceClaimStatus{ResourceClaimName: name, RequestMappings: []v1.ContainerExtendedResourceRequest{mapTo("train", "nvidia.com/gpu", "container-0-request-1")}}
			if fmt.Sprint(m.Extended.Status) != fmt.Sprint(want) || fmt.Sprint(m.Extended.Names) != "[nvidia.com/gpu]" || m.Extended.Pod != "p" {
				t.Errorf("extended %+v, want status %+v for nvidia.com/gpu", m.Extended, want)
			}
		})
	}
}

// TestAttachCreatesEachMemberOnce: a gang of several members creates one
// claim per member, with the upstream shape, and the creations carry the
// pods as owners; a second attempt before the informers show them creates
// nothing more (the names are the pods').
func TestAttachCreatesEachMemberOnce(t *testing.T) {
	var pods []*v1.Pod
	for i := range 5 {
		p := podWith(nil, container("train", "nvidia.com/gpu", 2))
		p.Name, p.UID = fmt.Sprintf("p-%d", i), types.UID(fmt.Sprint("uid-", i))
		pods = append(pods, p)
	}
	room, client := roomFor(t, nil, nil)
	for range 2 {
		if err := room.Attach(t.Context(), gangOf(pods...)); !errors.Is(err, placement.ErrNotReady) {
			t.Fatalf("Attach: %v, want ErrNotReady", err)
		}
	}
	list, err := client.ResourceV1().ResourceClaims("ns").List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != len(pods) {
		t.Fatalf("%d claims, want %d", len(list.Items), len(pods))
	}
	for i := range list.Items {
		c := &list.Items[i]
		var owner *v1.Pod
		for _, p := range pods {
			if IsFor(c, p) {
				owner = p
			}
		}
		if owner == nil || c.Name != ClaimName(owner) || len(c.Spec.Devices.Requests) != 1 || c.Spec.Devices.Requests[0].Exactly.Count != 2 {
			t.Errorf("claim %s: owner %v, requests %+v", c.Name, owner, c.Spec.Devices.Requests)
		}
	}
}
