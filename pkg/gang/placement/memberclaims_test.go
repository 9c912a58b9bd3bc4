package placement_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpufabric/gpufabric/pkg/gang/placement"
	"github.com/gpufabric/gpufabric/pkg/gang/placement/index"
	"github.com/gpufabric/gpufabric/pkg/gang/placement/scenario"
	"github.com/gpufabric/gpufabric/pkg/topology"
)

func plainGroup(minCount int32) *schedulingv1beta1.PodGroup {
	return &schedulingv1beta1.PodGroup{
		ObjectMeta: metav1.ObjectMeta{Namespace: scenario.Namespace, Name: "pg", UID: "uid-pg"},
		Spec:       schedulingv1beta1.PodGroupSpec{SchedulingPolicy: schedulingv1beta1.PodGroupSchedulingPolicy{Gang: &schedulingv1beta1.GangSchedulingPolicy{MinCount: minCount}}},
	}
}

// TestNewGangClaimNamedByMembers: a claim several members name (by
// resourceClaimName) is allocated once, as kube-scheduler shares one
// pending allocation among a PodGroup's pods: unallocated and named by
// every member, it becomes a shared claim of the gang (reserved for each
// member); allocated, it stays each member's (its node selector pins
// them); named by only some members, or by more members than a claim can
// be reserved for, the gang is refused with the reason.
func TestNewGangClaimNamedByMembers(t *testing.T) {
	cache := scenario.GPUClaim("cache", 1)
	allocated := scenario.AllocatedClaim("warm", "a-n00", "gpu-0")
	many := scenario.GPUClaim("many", 1)
	claims := getter(cache, allocated, many, scenario.GPUClaim("a-gpu", 1), scenario.GPUClaim("b-gpu", 1), scenario.GPUClaim("c-gpu", 1))
	tests := map[string]struct {
		pods       []*v1.Pod
		want       gangView
		wantShared []types.UID
		wantErr    string
	}{
		"every member names it": {
			pods:       []*v1.Pod{scenario.Pod("a", "1", "1Gi", "a-gpu", "cache"), scenario.Pod("b", "1", "1Gi", "cache", "b-gpu")},
			want:       gangView{MinCount: 2, Members: map[string][]string{"a": {"a-gpu"}, "b": {"b-gpu"}}, Shared: []string{"cache"}},
			wantShared: []types.UID{cache.UID},
		},
		"allocated, pins each member": {
			pods: []*v1.Pod{scenario.Pod("a", "1", "1Gi", "a-gpu", "warm"), scenario.Pod("b", "1", "1Gi", "warm")},
			want: gangView{MinCount: 2, Members: map[string][]string{"a": {"a-gpu", "warm"}, "b": {"warm"}}},
		},
		"named twice by one pod": {
			pods: []*v1.Pod{scenario.Pod("a", "1", "1Gi", "a-gpu", "a-gpu"), scenario.Pod("b", "1", "1Gi", "b-gpu")},
			want: gangView{MinCount: 2, Members: map[string][]string{"a": {"a-gpu"}, "b": {"b-gpu"}}},
		},
		"some members name it": {
			pods:    []*v1.Pod{scenario.Pod("a", "1", "1Gi", "cache"), scenario.Pod("b", "1", "1Gi", "cache"), scenario.Pod("c", "1", "1Gi", "c-gpu")},
			wantErr: "claim default/cache is named by 2 of the gang's 3 members (a, b); gpufabric-scheduler allocates a claim that members share once",
		},
	}
	var crowd []*v1.Pod
	for i := range resourceapi.ResourceClaimReservedForMaxSize + 1 {
		crowd = append(crowd, scenario.Pod(fmt.Sprintf("m-%d", i), "1", "1Gi", "many"))
	}
	tests["more members than reservations"] = struct {
		pods       []*v1.Pod
		want       gangView
		wantShared []types.UID
		wantErr    string
	}{pods: crowd, wantErr: "claim default/many is named by 257 members (m-0, m-1, m-2 and 254 more) and would be reserved for 257 consumers, more than the 256"}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			g, err := placement.NewGang(plainGroup(2), tc.pods, claims)
			if tc.wantErr != "" {
				if !errors.Is(err, placement.ErrUnsupported) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want ErrUnsupported with %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, viewGang(g)); diff != "" {
				t.Errorf("gang (-want +got):\n%s", diff)
			}
			var shared []types.UID
			for uid := range g.MemberShared {
				shared = append(shared, uid)
			}
			if diff := cmp.Diff(tc.wantShared, shared); diff != "" {
				t.Errorf("member-shared claims (-want +got):\n%s", diff)
			}
		})
	}
}

// TestPlaceClaimNamedByMembers: two members that name one node-local GPU
// claim get it allocated once, and both go to the node of its device; two
// nodes have 2 free GPUs, one has 4, and each member also has a 1-GPU
// claim of its own, so the gang fits only on the node with 4. Before, the
// engine allocated the claim once per member (the members on two nodes,
// the claim's GPU twice).
func TestPlaceClaimNamedByMembers(t *testing.T) {
	ctx := context.Background()
	b, err := scenario.Build(scenario.Scenario{
		Domains: []scenario.DomainSpec{{ID: "a", Kind: string(topology.DomainKindNVSwitch), Nodes: 3, GPUsPerNode: 4}},
		Load: []scenario.LoadSpec{
			{Node: scenario.NodeName("a", 0), GPUs: []int{0, 1}},
			{Node: scenario.NodeName("a", 1), GPUs: []int{0, 1}},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	claims := getter(scenario.GPUClaim("cache", 1), scenario.GPUClaim("a-gpu", 1), scenario.GPUClaim("b-gpu", 1))
	g, err := placement.NewGang(plainGroup(2), []*v1.Pod{
		scenario.Pod("a", "1", "1Gi", "a-gpu", "cache"), scenario.Pod("b", "1", "1Gi", "b-gpu", "cache"),
	}, claims)
	if err != nil {
		t.Fatal(err)
	}
	snap, err := index.NewSnapshot(ctx, b.Config.Index, b.Input)
	if err != nil {
		t.Fatal(err)
	}
	d, u, err := placement.Place(ctx, b.Config, snap, g)
	if err != nil || d == nil {
		t.Fatalf("not placed: %v %+v", err, u)
	}
	var allocs []string
	devices := map[string]string{}
	for _, c := range d.Claims {
		allocs = append(allocs, fmt.Sprintf("%s shared=%v", c.Name, c.Shared))
		for _, r := range c.Allocation.Devices.Results {
			if other, ok := devices[r.Pool+"/"+r.Device]; ok {
				t.Errorf("device %s/%s allocated to %s and %s", r.Pool, r.Device, other, c.Name)
			}
			devices[r.Pool+"/"+r.Device] = c.Name
			if want := scenario.NodeName("a", 2); r.Pool != want {
				t.Errorf("claim %s on %s, want %s", c.Name, r.Pool, want)
			}
		}
	}
	if diff := cmp.Diff([]string{"cache shared=true", "a-gpu shared=false", "b-gpu shared=false"}, allocs); diff != "" {
		t.Errorf("allocations (-want +got):\n%s", diff)
	}
	for _, p := range d.Pods {
		if want := scenario.NodeName("a", 2); p.Node != want {
			t.Errorf("pod %s on %s, want %s (the shared claim's node)", p.Name, p.Node, want)
		}
	}
}
