package inspect

import (
	"github.com/gpufabric/gpufabric/pkg/gang/vocab"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/gpufabric/gpufabric/pkg/topology"
)

func TestBuildStatusScenario(t *testing.T) {
	train := GangUse{GangRef: GangRef{Kind: KindPodGroup, Namespace: "team-a", Name: "train", Job: "llm-train"}, GPUs: 8, Channels: 1}
	notebook := GangUse{GangRef: GangRef{Kind: KindPod, Namespace: "team-b", Name: "notebook"}, GPUs: 1}
	domA := DomainStatus{ID: "dom-a", Nodes: 2, GPUs: GPUCounts{Total: 8, Used: 8}, Channels: ChannelCounts{Total: 4, Used: 1}, Gangs: []GangUse{train}}
	domB := DomainStatus{ID: "dom-b", Nodes: 2, GPUs: GPUCounts{Total: 8, Used: 1, Tainted: 1, Free: 6}, Channels: ChannelCounts{Total: 4}, Gangs: []GangUse{notebook}}
	rack1, rack2 := domA, domB
	rack1.ID, rack2.ID = "rack-1", "rack-2"
	all := GPUCounts{Total: 16, Used: 9, Tainted: 1, Free: 6}
	leaf := DomainStatus{ID: "leaf-1", Nodes: 4, GPUs: all, Channels: ChannelCounts{Total: 8, Used: 1}, Gangs: []GangUse{train, notebook}}
	want := &StatusReport{
		Levels: []LevelStatus{
			{Key: topology.TopologyKeyNVLinkDomain, Domains: []DomainStatus{domA, domB}, NodesWithoutGPUs: 1},
			{Key: rackKey, Domains: []DomainStatus{rack1, rack2}, NodesWithoutLabel: 1},
			{Key: leafKey, Domains: []DomainStatus{leaf}, NodesWithoutLabel: 1},
		},
		Cluster: DomainStatus{ID: topology.ClusterDomainID, Nodes: 5, GPUs: all, Channels: ChannelCounts{Total: 8, Used: 1}, Gangs: []GangUse{train, notebook}},
		Waiting: []WaitingGang{{Namespace: "team-b", Name: "big", Position: 1, Created: testNow.Add(-10 * time.Minute), Reason: "Unschedulable", Message: bigMessage}},
	}
	got, err := BuildStatus(scenario().c, testLevels)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("status (-want +got):\n%s", diff)
	}
}

func TestBuildStatusRules(t *testing.T) {
	tests := []struct {
		name     string
		change   func(b *builder)
		noLevels bool
		check    func(t *testing.T, r *StatusReport)
	}{{
		name:     "without levels only the NVLink domain",
		noLevels: true,
		check: func(t *testing.T, r *StatusReport) {
			if len(r.Levels) != 1 || r.Levels[0].Key != topology.TopologyKeyNVLinkDomain {
				t.Errorf("levels %+v, want the NVLink domain only", r.Levels)
			}
		},
	}, {
		name: "a pool's newest generation counts",
		change: func(b *builder) {
			b.node("b-0", "dom-b", 2, nil)
			b.c.Nodes = b.c.Nodes[:len(b.c.Nodes)-1] // the Node exists already
			b.c.Slices[len(b.c.Slices)-1].Spec.Pool.Generation = 1
		},
		check: func(t *testing.T, r *StatusReport) {
			if got := r.Levels[0].Domains[1].GPUs; got != (GPUCounts{Total: 6, Used: 1, Tainted: 1, Free: 4}) {
				t.Errorf("dom-b GPUs %+v, want 2 of b-0's new generation + 4 of b-1", got)
			}
		},
	}, {
		name: "NoExecute taints count, None taints do not",
		change: func(b *builder) {
			b.taint("b-0", "gpu-1", "example.com/x", "", resourceapi.DeviceTaintEffectNone)
			b.taint("b-0", "gpu-2", "example.com/y", "", resourceapi.DeviceTaintEffectNoExecute)
		},
		check: func(t *testing.T, r *StatusReport) {
			if got := r.Cluster.GPUs; got.Tainted != 2 || got.Free != 5 {
				t.Errorf("cluster GPUs %+v, want 2 tainted, 5 free", got)
			}
		},
	}, {
		name: "a claim reserved for nobody holds its devices",
		change: func(b *builder) {
			b.claim("team-c", "orphan", nil, "b-0/gpu-0", "b-0/gpu-1")
		},
		check: func(t *testing.T, r *StatusReport) {
			want := GangUse{GangRef: GangRef{Kind: KindClaim, Namespace: "team-c", Name: "orphan"}, GPUs: 2}
			if g := r.Levels[0].Domains[1].Gangs; len(g) != 2 || g[0] != want {
				t.Errorf("dom-b gangs %+v, want %+v first", g, want)
			}
		},
	}, {
		name: "consumers: a PodGroup before pods, a pod that is gone by its name",
		change: func(b *builder) {
			b.claim("team-c", "shared", []string{"pods/gone", "podgroups/grp"}, "b-0/gpu-0")
			b.claim("team-c", "left", []string{"pods/gone"}, "b-0/gpu-1")
		},
		check: func(t *testing.T, r *StatusReport) {
			var got []string
			for _, g := range r.Levels[0].Domains[1].Gangs {
				got = append(got, g.Kind+" "+g.Namespace+"/"+g.Name)
			}
			want := []string{"Pod team-b/notebook", "Pod team-c/gone", "PodGroup team-c/grp"}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("dom-b gangs (-want +got):\n%s", diff)
			}
		},
	}, {
		name: "a PodGroup owned by a Job names it without pods",
		change: func(b *builder) {
			b.c.PodGroups[1].OwnerReferences = []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: "big-job"}}
		},
		check: func(t *testing.T, r *StatusReport) {
			if len(r.Waiting) != 1 || r.Waiting[0].Job != "big-job" {
				t.Errorf("waiting %+v, want big of job big-job", r.Waiting)
			}
		},
	}, {
		name: "a PodGroup without condition waits for an attempt; one being deleted is left out",
		change: func(b *builder) {
			b.c.PodGroups[1].Status.Conditions = nil
			b.group("team-c", "gone", 1)
			b.c.PodGroups[2].DeletionTimestamp = ptr.To(metav1.Now())
		},
		check: func(t *testing.T, r *StatusReport) {
			want := []WaitingGang{{Namespace: "team-b", Name: "big", Position: 1, Created: testNow.Add(-10 * time.Minute), Reason: ReasonPending, Message: "not attempted yet"}}
			if diff := cmp.Diff(want, r.Waiting); diff != "" {
				t.Errorf("waiting (-want +got):\n%s", diff)
			}
		},
	}, {
		name: "fewer ungated members than minCount",
		change: func(b *builder) {
			b.c.PodGroups[1].Status.Conditions = nil
			b.gate("team-b", "big-0", "example.com/quota")
		},
		check: func(t *testing.T, r *StatusReport) {
			want := WaitingGang{Namespace: "team-b", Name: "big", Position: 1, Created: testNow.Add(-10 * time.Minute), Reason: vocab.ReasonWaitingForMembers, Message: "2 of 4 members exist without scheduling gates (minCount 3)"}
			if len(r.Waiting) != 1 || r.Waiting[0] != want {
				t.Errorf("waiting %+v, want %+v", r.Waiting, want)
			}
		},
	}, {
		name: "nodes disagreeing on their NVLink domain warn",
		change: func(b *builder) {
			b.c.Slices[0].Spec.Devices[1].Attributes[topology.AttrNVLinkDomain] = resourceapi.DeviceAttribute{StringValue: ptr.To("dom-z")}
		},
		check: func(t *testing.T, r *StatusReport) {
			if len(r.Warnings) != 1 {
				t.Errorf("warnings %q, want one about a-0", r.Warnings)
			}
		},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := scenario()
			if tc.change != nil {
				tc.change(b)
			}
			opts := testLevels
			if tc.noLevels {
				opts = Options{}
			}
			r, err := BuildStatus(b.c, opts)
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, r)
		})
	}
}

func TestBuildStatusBadLevels(t *testing.T) {
	if _, err := BuildStatus(&Cluster{Nodes: []corev1.Node{{}}}, Options{Levels: []string{rackKey, rackKey}}); err == nil {
		t.Error("a repeated level was accepted")
	}
}
