package cli

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/gpufabric/gpufabric/pkg/gang/placement/scenario"
	"github.com/gpufabric/gpufabric/pkg/inspect"
	"github.com/gpufabric/gpufabric/pkg/topology"
)

func liveClasses() []resourceapi.DeviceClass {
	var out []resourceapi.DeviceClass
	for _, c := range scenario.DeviceClasses() {
		out = append(out, *c)
	}
	return out
}

// TestDryRun: fit places a hypothetical gang with the engine on the
// cluster as it is (snapshotCluster: dom-a has 5 free GPUs, 3 of a-0 being
// held; dom-b 8) and says where, or the engine's reason.
func TestDryRun(t *testing.T) {
	opts := inspect.Options{Levels: []string{rackKey}}
	tests := []struct {
		name    string
		req     fitRequest
		classes []resourceapi.DeviceClass
		want    string // fits, level, domain, nodes; or "no: <message part>"
		wantErr string
	}{
		{name: "two full nodes in one NVLink domain: only dom-b has them",
			req:  fitRequest{Pods: 2, GPUsPerPod: 4, TopologyKey: topology.TopologyKeyNVLinkDomain},
			want: "yes gpufabric.dev/nvlinkDomain dom-b [{b-0 1} {b-1 1}]"},
		{name: "three full nodes in one NVLink domain: none",
			req:  fitRequest{Pods: 3, GPUsPerPod: 4, TopologyKey: topology.TopologyKeyNVLinkDomain},
			want: "no: needs 3 pods with 12 gpu.gpufabric.dev devices in one gpufabric.dev/nvlinkDomain"},
		{name: "three full nodes anywhere: a-1, b-0, b-1",
			req:  fitRequest{Pods: 3, GPUsPerPod: 4},
			want: "yes " + topology.TopologyKeyCluster + " cluster [{a-1 1} {b-0 1} {b-1 1}]"},
		{name: "small pods pack into the free GPUs of a-0 first",
			req:  fitRequest{Pods: 1, GPUsPerPod: 1, TopologyKey: topology.TopologyKeyNVLinkDomain},
			want: "yes gpufabric.dev/nvlinkDomain dom-a [{a-0 1}]"},
		{name: "segments of one full node: dom-b holds both, the segments are named",
			req:  fitRequest{Pods: 2, GPUsPerPod: 4, SegmentSize: 1, SegmentTopologyKey: topology.TopologyKeyNVLinkDomain},
			want: "yes gpufabric.dev/nvlinkDomain dom-b [{b-0 1} {b-1 1}]"},
		{name: "segments of 2 full nodes: only dom-b holds one",
			req:  fitRequest{Pods: 4, GPUsPerPod: 4, SegmentSize: 2, SegmentTopologyKey: topology.TopologyKeyNVLinkDomain},
			want: "no: needs 4 pods with 16 gpu.gpufabric.dev devices in segments of 2 (each in one gpufabric.dev/nvlinkDomain)"},
		{name: "segment size without its level", req: fitRequest{Pods: 2, GPUsPerPod: 1, SegmentSize: 2},
			wantErr: "annotation gpufabric.dev/segment-topology-key: value \"\" is not a label key"},
		{name: "no GPU class", req: fitRequest{Pods: 1, GPUsPerPod: 1}, classes: []resourceapi.DeviceClass{},
			wantErr: "DeviceClass gpu.gpufabric.dev does not exist"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			classes := tc.classes
			if classes == nil {
				classes = liveClasses()
			}
			rep, err := dryRun(t.Context(), snapshotCluster(), classes, tc.req, opts)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := fmt.Sprintf("yes %s %s %v", rep.Level, rep.Domain, rep.Nodes)
			if !rep.Fits {
				got = "no: " + rep.Message
			}
			if !strings.HasPrefix(got, tc.want) {
				t.Errorf("fit %+v:\n got %s\nwant %s…", tc.req, got, tc.want)
			}
			if tc.req.SegmentSize > 0 && rep.Fits && rep.Segments != "segments in gpufabric.dev/nvlinkDomain: 0-1 in dom-b" {
				t.Errorf("segments %q, want both in dom-b", rep.Segments)
			}
			var b bytes.Buffer
			if err := renderFit(&b, rep); err != nil || !strings.HasPrefix(b.String(), map[bool]string{true: "Fits: yes", false: "Fits: no"}[rep.Fits]) {
				t.Errorf("rendered %q, %v", b.String(), err)
			}
		})
	}
}

// TestRenderFitFabricHealth: a placement that fabric health decided says
// so under the domain.
func TestRenderFitFabricHealth(t *testing.T) {
	var b bytes.Buffer
	rep := &fitReport{Pods: 4, GPUsPerPod: 4, Fits: true, Level: topology.TopologyKeyNVLinkDomain, Domain: "b",
		FabricHealth: "fabric health: chose b, whose devices report no link errors, over 1 better-fitting domains with link errors or degraded links"}
	if err := renderFit(&b, rep); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "\nFabric health: chose b, whose devices report no link errors") {
		t.Errorf("rendered %q, want a Fabric health line", b.String())
	}
}
