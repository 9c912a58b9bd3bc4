package mock

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"

	"github.com/gpufabric/gpufabric/pkg/topology"
)

// TestFixtureTrees builds the fabric tree from what discovery publishes for
// every node of a fixture and checks the domains at each level: NVLink
// domain, rack, IB leaf, zone, cluster.
func TestFixtureTrees(t *testing.T) {
	levels := topology.TreeConfig{LabelLevels: []string{
		"topology.gpufabric.dev/rack", "topology.gpufabric.dev/ib-leaf", "topology.kubernetes.io/zone",
	}}
	// Per level: domain count, and "nodes/GPUs" of the largest domain.
	type levelView struct {
		Domains int
		Largest string
	}
	tests := []struct {
		fixture string
		want    []levelView
	}{
		{"gb200-nvl72x2.yaml", []levelView{{2, "18/72"}, {2, "18/72"}, {1, "36/144"}, {1, "36/144"}, {1, "36/144"}}},
		{"hgx-h100x8.yaml", []levelView{{8, "1/8"}, {4, "2/16"}, {2, "4/32"}, {1, "8/64"}, {1, "8/64"}}},
	}
	for _, tc := range tests {
		t.Run(tc.fixture, func(t *testing.T) {
			t.Parallel()
			f, err := LoadFile(filepath.Join("fabrics", tc.fixture))
			if err != nil {
				t.Fatal(err)
			}
			all, err := f.DiscoverAll(t.Context(), t.TempDir())
			if err != nil {
				t.Fatalf("discover: %v", err)
			}
			var nodes []*corev1.Node
			var slices []*resourceapi.ResourceSlice
			for _, nr := range all {
				nodes = append(nodes, nr.Node)
				for i := range nr.Slices {
					slices = append(slices, &nr.Slices[i])
				}
			}
			tree, err := topology.BuildTree(levels, nodes, slices)
			if err != nil {
				t.Fatalf("build tree: %v", err)
			}
			if len(tree.Warnings) > 0 {
				t.Errorf("warnings: %v", tree.Warnings)
			}
			var got []levelView
			for _, l := range tree.Levels {
				v := levelView{Domains: len(l.Domains)}
				for _, d := range l.Domains {
					if s := fmt.Sprintf("%d/%d", len(d.Nodes), d.GPUs); len(d.Nodes) > 0 && (v.Largest == "" || d.GPUs > atoiGPUs(v.Largest)) {
						v.Largest = s
					}
				}
				got = append(got, v)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("levels (-want +got):\n%s", diff)
			}
			// Every NVL72 rack is exactly one NVLink domain.
			if tc.fixture == "gb200-nvl72x2.yaml" {
				for _, d := range tree.Levels[0].Domains {
					rack := tree.Levels[1].DomainOf(d.Nodes[0])
					if rack == nil || !cmp.Equal(rack.Nodes, d.Nodes) {
						t.Errorf("NVLink domain %s does not match its rack", d.ID)
					}
				}
			}
		})
	}
}

func atoiGPUs(view string) int {
	var n, g int
	_, _ = fmt.Sscanf(view, "%d/%d", &n, &g)
	return g
}
