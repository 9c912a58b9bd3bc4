package placement_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpufabric/gpufabric/pkg/gang/placement"
	"github.com/gpufabric/gpufabric/pkg/gang/placement/index"
	"github.com/gpufabric/gpufabric/pkg/gang/placement/scenario"
	"github.com/gpufabric/gpufabric/pkg/topology"
)

func TestNewGangSegments(t *testing.T) {
	pg := func(key string, ann map[string]string) *schedulingv1beta1.PodGroup {
		p := &schedulingv1beta1.PodGroup{ObjectMeta: metav1.ObjectMeta{Namespace: scenario.Namespace, Name: "pg", Annotations: ann}}
		if key != "" {
			p.Spec.SchedulingConstraints = &schedulingv1beta1.PodGroupSchedulingConstraints{Topology: []schedulingv1beta1.TopologyConstraint{{Key: key}}}
		}
		return p
	}
	seg := func(size, key string) map[string]string {
		return map[string]string{topology.AnnotationSegmentSize: size, topology.AnnotationSegmentTopologyKey: key}
	}
	tests := map[string]struct {
		pg       *schedulingv1beta1.PodGroup
		wantSize int
		wantKey  string
		// wantErr is what an ErrInvalid error must say.
		wantErr string
	}{
		"none":            {pg: pg("rack", nil)},
		"read":            {pg: pg("rack", seg("16", topology.TopologyKeyNVLinkDomain)), wantSize: 16, wantKey: topology.TopologyKeyNVLinkDomain},
		"no gang key":     {pg: pg("", seg("4", "rack")), wantSize: 4, wantKey: "rack"},
		"bad size":        {pg: pg("rack", seg("sixteen", topology.TopologyKeyNVLinkDomain)), wantErr: topology.AnnotationSegmentSize},
		"size alone":      {pg: pg("rack", map[string]string{topology.AnnotationSegmentSize: "16"}), wantErr: topology.AnnotationSegmentTopologyKey},
		"the gang's key":  {pg: pg("rack", seg("16", "rack")), wantErr: "the gang's own topology key"},
		"bad level value": {pg: pg("", seg("16", "a b")), wantErr: topology.AnnotationSegmentTopologyKey},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			g, err := placement.NewGang(tc.pg, []*v1.Pod{scenario.Pod("p-0", "1", "1Gi")}, getter())
			if tc.wantErr != "" {
				if !errors.Is(err, placement.ErrInvalid) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want ErrInvalid naming %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if g.SegmentSize != tc.wantSize || g.SegmentTopologyKey != tc.wantKey {
				t.Errorf("segments %d %q, want %d %q", g.SegmentSize, g.SegmentTopologyKey, tc.wantSize, tc.wantKey)
			}
		})
	}
}

// TestSegmentsMissingMembersWait: ranks come from the completion index;
// rank 0 runs in nvl-b, ranks 1-5 are pending, segments of 4. Segment 0's
// pending ranks 1-3 join nvl-b; segment 1 has 2 of its 4 members, so they
// wait (no partial segment is placed, not even for a late gang).
func TestSegmentsMissingMembersWait(t *testing.T) {
	ctx := context.Background()
	b, err := scenario.Build(scenario.Scenario{Domains: []scenario.DomainSpec{
		{ID: "nvl-a", Nodes: 2, GPUsPerNode: 4}, {ID: "nvl-b", Nodes: 4, GPUsPerNode: 4},
	}})
	if err != nil {
		t.Fatal(err)
	}
	g, _, err := scenario.BuildGang(scenario.GangSpec{Name: "g", Pods: 5, MinCount: 1, GPUsPerPod: 1, SegmentSize: 4, SegmentTopologyKey: topology.TopologyKeyNVLinkDomain})
	if err != nil {
		t.Fatal(err)
	}
	for i, m := range g.Members {
		m.Pod.Labels = map[string]string{"batch.kubernetes.io/job-completion-index": strconv.Itoa(i + 1)}
	}
	running := scenario.Pod("g-run", "1", "1Gi")
	running.Labels = map[string]string{"batch.kubernetes.io/job-completion-index": "0"}
	running.Spec.NodeName = "nvl-b-n03"
	g.Running, g.BoundNodes = []*v1.Pod{running}, []string{"nvl-b-n03"}
	snap, err := index.NewSnapshot(ctx, b.Config.Index, b.Input)
	if err != nil {
		t.Fatal(err)
	}
	d, u, err := placement.Place(ctx, b.Config, snap, g)
	if err != nil || d == nil {
		t.Fatalf("place: %v %+v", err, u)
	}
	var got []string
	for _, p := range d.Pods {
		got = append(got, p.Name+"@"+p.Node[:5])
	}
	if diff := cmp.Diff([]string{"g-00@nvl-b", "g-01@nvl-b", "g-02@nvl-b"}, got); diff != "" {
		t.Errorf("placed (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]placement.SegmentPlacement{{Index: 0, Domain: "nvl-b", Pods: 3}}, d.Segments); diff != "" {
		t.Errorf("segments (-want +got):\n%s", diff)
	}
}

func TestSegmentSummary(t *testing.T) {
	d := &placement.Decision{SegmentTopologyKey: topology.TopologyKeyNVLinkDomain}
	if got := d.SegmentSummary(); got != "" {
		t.Errorf("no segments: %q, want empty", got)
	}
	for i, dom := range []string{"a", "a", "b", "c", "c", "c", "d", "e", "f"} {
		d.Segments = append(d.Segments, placement.SegmentPlacement{Index: i, Domain: dom, Pods: 16})
	}
	want := "segments in gpufabric.dev/nvlinkDomain: 0-1 in a, 2 in b, 3-5 in c, 6 in d, 2 more"
	if got := d.SegmentSummary(); got != want {
		t.Errorf("summary %q, want %q", got, want)
	}
}
