package placement_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpufabric/gpufabric/pkg/gang/placement"
	"github.com/gpufabric/gpufabric/pkg/gang/placement/index"
	"github.com/gpufabric/gpufabric/pkg/gang/placement/scenario"
	"github.com/gpufabric/gpufabric/pkg/topology"
)

func strp(s string) *string { return &s }

func getter(claims ...*resourceapi.ResourceClaim) placement.ClaimGetter {
	return func(ns, name string) (*resourceapi.ResourceClaim, error) {
		for _, c := range claims {
			if c.Namespace == ns && c.Name == name {
				return c, nil
			}
		}
		return nil, fmt.Errorf("claim %s/%s not found", ns, name)
	}
}

// gangView is the comparable part of a Gang.
type gangView struct {
	MinCount              int
	TopologyKey           string
	PreferredTopologyKey  string
	RailAlignmentRequired bool
	Members               map[string][]string
	Shared                []string
}

func viewGang(g *placement.Gang) gangView {
	v := gangView{MinCount: g.MinCount, TopologyKey: g.TopologyKey, PreferredTopologyKey: g.PreferredTopologyKey,
		RailAlignmentRequired: g.RailAlignmentRequired, Members: map[string][]string{}}
	for _, m := range g.Members {
		names := []string{}
		for _, c := range m.Claims {
			names = append(names, c.Name)
		}
		v.Members[m.Pod.Name] = names
	}
	for _, c := range g.SharedClaims {
		v.Shared = append(v.Shared, c.Name)
	}
	return v
}

func TestNewGang(t *testing.T) {
	pg := func(minCount int32) *schedulingv1beta1.PodGroup {
		return &schedulingv1beta1.PodGroup{
			ObjectMeta: metav1.ObjectMeta{Namespace: scenario.Namespace, Name: "pg", Annotations: map[string]string{
				topology.AnnotationPreferredTopologyKey: "rack", topology.AnnotationRailAlignment: topology.RailAlignmentRequired,
			}},
			Spec: schedulingv1beta1.PodGroupSpec{
				SchedulingPolicy:      schedulingv1beta1.PodGroupSchedulingPolicy{Gang: &schedulingv1beta1.GangSchedulingPolicy{MinCount: minCount}},
				SchedulingConstraints: &schedulingv1beta1.PodGroupSchedulingConstraints{Topology: []schedulingv1beta1.TopologyConstraint{{Key: topology.TopologyKeyNVLinkDomain}}},
				ResourceClaims:        []schedulingv1beta1.PodGroupResourceClaim{{Name: "fabric", ResourceClaimTemplateName: strp("fabric-tmpl")}},
			},
			Status: schedulingv1beta1.PodGroupStatus{ResourceClaimStatuses: []schedulingv1beta1.PodGroupResourceClaimStatus{{Name: "fabric", ResourceClaimName: strp("pg-fabric-x")}}},
		}
	}
	// A pod with a template claim resolved through its status, and the
	// PodGroup's template claim (shared, not per pod).
	pod := func(name string, withStatus bool) *v1.Pod {
		p := scenario.Pod(name, "1", "1Gi")
		p.Spec.ResourceClaims = []v1.PodResourceClaim{
			{Name: "gpu", ResourceClaimTemplateName: strp("gpu-tmpl")},
			{Name: "fabric", ResourceClaimTemplateName: strp("fabric-tmpl")},
		}
		if withStatus {
			p.Status.ResourceClaimStatuses = []v1.PodResourceClaimStatus{{Name: "gpu", ResourceClaimName: strp(name + "-gpu-x")}}
		}
		return p
	}
	claims := getter(scenario.Claim("pg-fabric-x", topology.FabricDomainDeviceClass, 1), scenario.GPUClaim("b-gpu-x", 4), scenario.GPUClaim("a-gpu-x", 4))
	tests := map[string]struct {
		pg      *schedulingv1beta1.PodGroup
		pods    []*v1.Pod
		want    gangView
		wantErr error
	}{
		"resolves and sorts": {
			pg:   pg(2),
			pods: []*v1.Pod{pod("b", true), pod("a", true)},
			want: gangView{MinCount: 2, TopologyKey: topology.TopologyKeyNVLinkDomain, PreferredTopologyKey: "rack", RailAlignmentRequired: true,
				Members: map[string][]string{"a": {"a-gpu-x"}, "b": {"b-gpu-x"}}, Shared: []string{"pg-fabric-x"}},
		},
		"too few members":   {pg: pg(3), pods: []*v1.Pod{pod("a", true)}, wantErr: placement.ErrNotReady},
		"claim not created": {pg: pg(1), pods: []*v1.Pod{pod("a", false)}, wantErr: placement.ErrNotReady},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			g, err := placement.NewGang(tc.pg, tc.pods, claims)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("err = %v, want %v", err, tc.wantErr)
			}
			if err != nil {
				return
			}
			if diff := cmp.Diff(tc.want, viewGang(g)); diff != "" {
				t.Errorf("gang (-want +got):\n%s", diff)
			}
		})
	}
}

// TestFragmentedIsCheap is the allocator's exponential case (brief §4):
// every node has 3 free GPUs and only the last has 4, and the claim asks for
// 4 GPUs in one nvlinkDomain. The count filter leaves one node, so the
// engine calls Allocate once.
func TestFragmentedIsCheap(t *testing.T) {
	ctx := context.Background()
	sc := scenario.Scenario{Domains: []scenario.DomainSpec{{ID: "f", Kind: string(topology.DomainKindNVSwitch), Nodes: 1000, GPUsPerNode: 8}}}
	for i := range 999 {
		sc.Load = append(sc.Load, scenario.LoadSpec{Node: scenario.NodeName("f", i), GPUs: []int{0, 2, 4, 6, 7}})
	}
	sc.Load = append(sc.Load, scenario.LoadSpec{Node: scenario.NodeName("f", 999), GPUs: []int{0, 2, 4, 6}})
	sc.Gangs = []scenario.GangSpec{{Name: "four", Pods: 1, GPUsPerPod: 4}}
	b, err := scenario.Build(sc)
	if err != nil {
		t.Fatal(err)
	}
	claim := b.Gangs[0].Members[0].Claims[0]
	claim.Spec.Devices.Constraints = []resourceapi.DeviceConstraint{{MatchAttribute: (*resourceapi.FullyQualifiedName)(strp(topology.TopologyKeyNVLinkDomain))}}
	snap, err := index.NewSnapshot(ctx, b.Config.Index, b.Input)
	if err != nil {
		t.Fatal(err)
	}
	d, u, err := placement.Place(ctx, b.Config, snap, b.Gangs[0])
	if err != nil || d == nil {
		t.Fatalf("not placed: %v %+v", err, u)
	}
	if got, want := d.Pods[0].Node, scenario.NodeName("f", 999); got != want {
		t.Errorf("node = %s, want %s", got, want)
	}
	if d.Stats.AllocateCalls != 1 || d.Stats.DomainsVerified != 1 {
		t.Errorf("stats = %+v, want one domain verified with one Allocate call", d.Stats)
	}
}

// TestInvalidPoolSelectorIgnored: a fabric-domain pool whose node selector
// the allocator cannot parse (matchFields metadata.name with several
// values) is ignored with a warning instead of failing every placement.
func TestInvalidPoolSelectorIgnored(t *testing.T) {
	ctx := context.Background()
	b, err := scenario.Build(scenario.Scenario{
		Domains: []scenario.DomainSpec{{ID: "a", Nodes: 2, GPUsPerNode: 4, Channels: 1}},
		Gangs:   []scenario.GangSpec{{Name: "g", Pods: 2, GPUsPerPod: 4, FabricClaim: true}, {Name: "plain", Pods: 2, GPUsPerPod: 4}},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range b.Input.ResourceSlices {
		if s.Spec.NodeSelector != nil {
			term := &s.Spec.NodeSelector.NodeSelectorTerms[0]
			term.MatchFields = []v1.NodeSelectorRequirement{{Key: "metadata.name", Operator: v1.NodeSelectorOpIn, Values: term.MatchExpressions[0].Values}}
			term.MatchExpressions = nil
		}
	}
	snap, err := index.NewSnapshot(ctx, b.Config.Index, b.Input)
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Warnings()) != 1 {
		t.Errorf("warnings = %q, want one", snap.Warnings())
	}
	if d, _, err := placement.Place(ctx, b.Config, snap, b.Gangs[0]); err != nil || d != nil {
		t.Errorf("gang with fabric claim: decision %v, err %v; want unschedulable", d, err)
	}
	if d, _, err := placement.Place(ctx, b.Config, snap, b.Gangs[1]); err != nil || d == nil {
		t.Errorf("gang without fabric claim: err %v, want a decision", err)
	}
}

// TestAssumeOnDeletedNode: a committed decision whose node has been deleted
// since is assumed without error (its pods hold nothing there), so one
// deleted node never blocks the placement of unrelated gangs.
func TestAssumeOnDeletedNode(t *testing.T) {
	ctx := context.Background()
	b, err := scenario.Build(scenario.Scenario{
		Domains: []scenario.DomainSpec{{ID: "a", Kind: string(topology.DomainKindNVSwitch), Nodes: 2, GPUsPerNode: 4}},
		Gangs:   []scenario.GangSpec{{Name: "first", Pods: 1, GPUsPerPod: 4}, {Name: "second", Pods: 1, GPUsPerPod: 4}},
	})
	if err != nil {
		t.Fatal(err)
	}
	snap, err := index.NewSnapshot(ctx, b.Config.Index, b.Input)
	if err != nil {
		t.Fatal(err)
	}
	d, _, err := placement.Place(ctx, b.Config, snap, b.Gangs[0])
	if err != nil || d == nil {
		t.Fatalf("first gang not placed: %v", err)
	}
	// The first gang's node is deleted before the informers show its commit.
	in := b.Input
	in.Nodes = slices.DeleteFunc(slices.Clone(in.Nodes), func(n *v1.Node) bool { return n.Name == d.Pods[0].Node })
	next, err := index.NewSnapshot(ctx, b.Config.Index, in)
	if err != nil {
		t.Fatal(err)
	}
	if err := placement.Assume(ctx, next, b.Gangs[0], d); err != nil {
		t.Fatalf("assume on a deleted node: %v", err)
	}
	d2, u, err := placement.Place(ctx, b.Config, next, b.Gangs[1])
	if err != nil || d2 == nil {
		t.Fatalf("second gang not placed: %v %+v", err, u)
	}
	if d2.Pods[0].Node == d.Pods[0].Node {
		t.Errorf("second gang placed on the deleted node %s", d2.Pods[0].Node)
	}
}

// TestAntiAffinityExistingPods: required pod anti-affinity is honoured in
// both directions against pods already running: a member avoids nodes with
// pods its terms select, and nodes whose pods' terms select it.
func TestAntiAffinityExistingPods(t *testing.T) {
	ctx := context.Background()
	term := func(key, value string) *v1.Affinity {
		return &v1.Affinity{PodAntiAffinity: &v1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []v1.PodAffinityTerm{{
			LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{key: value}}, TopologyKey: v1.LabelHostname,
		}}}}
	}
	tests := []struct {
		name     string
		existing func(*v1.Pod) // on node a-n00, a-n01 and a-n02
		member   func(*v1.Pod)
	}{
		{"the member's terms select running pods",
			func(p *v1.Pod) { p.Labels = map[string]string{"role": "db"} },
			func(p *v1.Pod) { p.Spec.Affinity = term("role", "db") }},
		{"running pods' terms select the member",
			func(p *v1.Pod) { p.Spec.Affinity = term("role", "train") },
			func(p *v1.Pod) { p.Labels = map[string]string{"role": "train"} }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := scenario.Build(scenario.Scenario{
				Domains: []scenario.DomainSpec{{ID: "a", Nodes: 4, GPUsPerNode: 4}},
				Gangs:   []scenario.GangSpec{{Name: "g", Pods: 1, GPUsPerPod: 1}},
			})
			if err != nil {
				t.Fatal(err)
			}
			for i := range 3 {
				p := scenario.BoundPod(fmt.Sprintf("running-%d", i), scenario.NodeName("a", i), "1", "1Gi")
				tt.existing(p)
				b.Input.Pods = append(b.Input.Pods, p)
			}
			tt.member(b.Gangs[0].Members[0].Pod)
			snap, err := index.NewSnapshot(ctx, b.Config.Index, b.Input)
			if err != nil {
				t.Fatal(err)
			}
			d, u, err := placement.Place(ctx, b.Config, snap, b.Gangs[0])
			if err != nil || d == nil {
				t.Fatalf("not placed: %v %+v", err, u)
			}
			if got, want := d.Pods[0].Node, scenario.NodeName("a", 3); got != want {
				t.Errorf("placed on %s, want %s (the only node without a conflicting pod)", got, want)
			}
		})
	}
}

// TestUnsupportedFields: a pod with a feature the engine does not model is
// refused with the field named.
func TestUnsupportedFields(t *testing.T) {
	pod := func(f func(*v1.Pod)) *v1.Pod {
		p := scenario.Pod("p", "1", "1Gi")
		f(p)
		return p
	}
	tests := []struct {
		name string
		pod  *v1.Pod
		want []string
	}{
		{"plain", pod(func(*v1.Pod) {}), nil},
		{"preferred terms are ignored", pod(func(p *v1.Pod) {
			p.Spec.Affinity = &v1.Affinity{PodAffinity: &v1.PodAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []v1.WeightedPodAffinityTerm{{Weight: 1}}}}
			p.Spec.TopologySpreadConstraints = []v1.TopologySpreadConstraint{{WhenUnsatisfiable: v1.ScheduleAnyway}}
		}), nil},
		{"required pod affinity", pod(func(p *v1.Pod) {
			p.Spec.Affinity = &v1.Affinity{PodAffinity: &v1.PodAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []v1.PodAffinityTerm{{TopologyKey: "k"}}}}
		}), []string{"spec.affinity.podAffinity.requiredDuringSchedulingIgnoredDuringExecution"}},
		{"anti-affinity with a namespace selector", pod(func(p *v1.Pod) {
			p.Spec.Affinity = &v1.Affinity{PodAntiAffinity: &v1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []v1.PodAffinityTerm{{
				TopologyKey: "k", NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "a"}},
			}}}}
		}), []string{"spec.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution[0].namespaceSelector"}},
		{"hard spread and a host port", pod(func(p *v1.Pod) {
			p.Spec.TopologySpreadConstraints = []v1.TopologySpreadConstraint{{WhenUnsatisfiable: v1.DoNotSchedule}}
			p.Spec.Containers[0].Ports = []v1.ContainerPort{{ContainerPort: 80, HostPort: 8080}}
		}), []string{"spec.topologySpreadConstraints[0] (whenUnsatisfiable: DoNotSchedule)", "spec.containers[0].ports[0].hostPort"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, placement.Unsupported(tt.pod)); diff != "" {
				t.Errorf("unsupported fields (-want +got):\n%s", diff)
			}
		})
	}
	_, err := placement.NewPodGang(tests[2].pod, getter())
	if !errors.Is(err, placement.ErrUnsupported) || !strings.Contains(err.Error(), "podAffinity") {
		t.Errorf("NewPodGang: %v, want ErrUnsupported naming the field", err)
	}
}
