package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpufabric/gpufabric/pkg/gang/placement/scenario"
	"github.com/gpufabric/gpufabric/pkg/inspect"
	"github.com/gpufabric/gpufabric/pkg/sim/fabric"
	"github.com/gpufabric/gpufabric/pkg/topology"
)

const rackKey = "topology.gpufabric.dev/rack"

// snapshotCluster: two NVLink domains of two 4-GPU nodes (racks r1, r2),
// 3 GPUs of a-0 held by a bound pod's allocated claim; a pending pod with
// an unallocated claim, a finished pod, a slice of another driver,
// server-managed metadata and the containers' images and environment, all
// of which the export leaves out.
func snapshotCluster() *inspect.Cluster {
	c := &inspect.Cluster{}
	for _, n := range []struct{ name, domain, rack string }{{"a-0", "dom-a", "r1"}, {"a-1", "dom-a", "r1"}, {"b-0", "dom-b", "r2"}, {"b-1", "dom-b", "r2"}} {
		node := scenario.Node(n.name, "64", "512Gi", map[string]string{rackKey: n.rack})
		node.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubelet"}}
		node.ResourceVersion = "42"
		node.Annotations = map[string]string{"kubectl.kubernetes.io/last-applied-configuration": "{}"}
		c.Nodes = append(c.Nodes, *node)
		var gpus []scenario.GPU
		for i := range 4 {
			gpus = append(gpus, scenario.GPU{NVLinkDomain: n.domain, Kind: topology.DomainKindMNNVL, Rail: int64(i)})
		}
		c.Slices = append(c.Slices, *scenario.GPUSlice(n.name, gpus))
	}
	other := scenario.GPUSlice("a-0", nil)
	other.Name, other.Spec.Driver = "a-0-other", "example.com/other"
	c.Slices = append(c.Slices, *other)

	held := scenario.AllocatedClaim("train-gpus", "a-0", "gpu-0", "gpu-1", "gpu-2")
	c.Claims = append(c.Claims, *held, *scenario.GPUClaim("waiting-gpus", 4))
	bound := scenario.BoundPod("train-0", "a-0", "1", "1Gi")
	bound.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpus", ResourceClaimName: &held.Name}}
	bound.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "WANDB_API_KEY", Value: "s3cr3t"}}
	bound.Spec.Containers[0].Image = "registry.example.com/team/train:v1"
	done := scenario.BoundPod("done-0", "b-0", "1", "1Gi")
	done.Status.Phase = corev1.PodSucceeded
	c.Pods = append(c.Pods, *bound, *done, *scenario.Pod("waiting-0", "1", "1Gi", "waiting-gpus"))
	return c
}

// TestSnapshotRoundTrip: what snapshot writes, gpufabric-sim reads back
// (fabric.Load, strict) with the same GPUs, domains, levels and load;
// nothing server-managed or foreign is in it.
func TestSnapshotRoundTrip(t *testing.T) {
	for _, format := range []string{inspect.FormatTable, inspect.FormatYAML, inspect.FormatJSON} {
		t.Run(format, func(t *testing.T) {
			raw, err := encodeFabric(fabricFile(snapshotCluster(), inspect.Options{Levels: []string{rackKey}}), format)
			if err != nil {
				t.Fatal(err)
			}
			for _, absent := range []string{"managedFields", "resourceVersion", "last-applied-configuration", "example.com/other", "done-0", "waiting-0", "waiting-gpus", "s3cr3t", "registry.example.com"} {
				if strings.Contains(string(raw), absent) {
					t.Errorf("snapshot contains %q", absent)
				}
			}
			path := filepath.Join(t.TempDir(), "fabric."+format)
			if err := os.WriteFile(path, raw, 0o600); err != nil {
				t.Fatal(err)
			}
			f, err := fabric.Load(path)
			if err != nil {
				t.Fatalf("gpufabric-sim cannot read the snapshot back: %v\n%s", err, raw)
			}
			if f.TotalGPUs != 16 || strings.Join(f.NodeNames, ",") != "a-0,a-1,b-0,b-1" {
				t.Errorf("read back %d GPUs on %v, want 16 on a-0,a-1,b-0,b-1", f.TotalGPUs, f.NodeNames)
			}
			if got := f.Busy; len(got) != 4 || got[0] != 3 || got[1]+got[2]+got[3] != 0 {
				t.Errorf("busy GPUs %v, want 3 on a-0 only", got)
			}
			if want := topology.TopologyKeyNVLinkDomain + "," + rackKey; strings.Join(f.Levels, ",") != want {
				t.Errorf("levels %v, want %s", f.Levels, want)
			}
			if len(f.Domains[0]) != 2 || f.Domains[0][0].GPUs != 8 || len(f.Domains[1]) != 2 {
				t.Errorf("domains %+v, want 2 NVLink domains of 8 GPUs and 2 racks", f.Domains)
			}
		})
	}
}
