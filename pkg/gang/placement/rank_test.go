package placement_test

import (
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2/ktesting"

	"github.com/gpufabric/gpufabric/pkg/gang/placement"
	"github.com/gpufabric/gpufabric/pkg/gang/placement/index"
	"github.com/gpufabric/gpufabric/pkg/gang/placement/scenario"
	"github.com/gpufabric/gpufabric/pkg/topology"
)

// TestRankOrder: a gang's members are placed in rank order, so that
// consecutive ranks share a node: 16 one-GPU pods on 4 nodes of 4 GPUs put
// ranks 4k..4k+3 on one node, for every way controllers number pods (an
// Indexed Job's completion index, JobSet's global job index then
// completion index, LeaderWorkerSet's group then worker index, a
// RayCluster's head then its workers' replica index, a numeric name
// suffix). Sorting names as strings would put ranks 10–15 before 2.
func TestRankOrder(t *testing.T) {
	for _, tc := range []struct {
		name string
		pod  func(rank int) (string, map[string]string)
	}{
		{"indexed job", func(r int) (string, map[string]string) {
			return fmt.Sprintf("train-%d-x%dz", r, 16-r), map[string]string{"batch.kubernetes.io/job-completion-index": fmt.Sprint(r)}
		}},
		{"jobset", func(r int) (string, map[string]string) {
			return fmt.Sprintf("js-workers-%d-%d-q%d", r/8, r%8, 16-r), map[string]string{
				"jobset.sigs.k8s.io/job-global-index": fmt.Sprint(r / 8), "batch.kubernetes.io/job-completion-index": fmt.Sprint(r % 8)}
		}},
		{"leaderworkerset", func(r int) (string, map[string]string) {
			return fmt.Sprintf("lws-%d-%d", r/4, r%4), map[string]string{
				"leaderworkerset.sigs.k8s.io/group-index": fmt.Sprint(r / 4), "leaderworkerset.sigs.k8s.io/worker-index": fmt.Sprint(r % 4)}
		}},
		{"numeric name suffix", func(r int) (string, map[string]string) { return fmt.Sprintf("worker-%d", r), nil }},
		{"raycluster", func(r int) (string, map[string]string) {
			if r == 0 {
				return "rc-head-zq7xk", map[string]string{"ray.io/node-type": "head", "ray.io/group": "headgroup"}
			}
			// Name suffixes in scrambled order (KubeRay's are random):
			// only the replica index orders workers.
			return fmt.Sprintf("rc-gpu-worker-%c", 'a'+r*7%16), map[string]string{"ray.io/node-type": "worker", "ray.io/group": "gpu",
				"ray.io/worker-group-replica-index": fmt.Sprint(r - 1)}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			in := index.SnapshotInput{DeviceClasses: scenario.DeviceClasses()}
			for i := range 4 {
				name := scenario.NodeName("d", i)
				in.Nodes = append(in.Nodes, scenario.Node(name, "64", "512Gi", nil))
				gpus := make([]scenario.GPU, 4)
				for j := range gpus {
					gpus[j] = scenario.GPU{NVLinkDomain: "dom", Kind: topology.DomainKindNVSwitch, Rail: int64(j)}
				}
				in.ResourceSlices = append(in.ResourceSlices, scenario.GPUSlice(name, gpus))
			}
			pg := &schedulingv1beta1.PodGroup{
				ObjectMeta: metav1.ObjectMeta{Namespace: scenario.Namespace, Name: "train", UID: "pg"},
				Spec: schedulingv1beta1.PodGroupSpec{SchedulingPolicy: schedulingv1beta1.PodGroupSchedulingPolicy{
					Gang: &schedulingv1beta1.GangSchedulingPolicy{MinCount: 16}}},
			}
			var pods []*v1.Pod
			var claims []*resourceapi.ResourceClaim
			rankOf := map[string]int{}
			for r := 15; r >= 0; r-- { // any order in
				name, labels := tc.pod(r)
				c := scenario.GPUClaim(name+"-gpu", 1)
				p := scenario.Pod(name, "1", "1Gi", c.Name)
				p.Labels = labels
				pods, claims = append(pods, p), append(claims, c)
				rankOf[name] = r
			}
			g, err := placement.NewGang(pg, pods, getter(claims...))
			if err != nil {
				t.Fatal(err)
			}
			snap, err := index.NewSnapshot(ctx, index.Config{}, in)
			if err != nil {
				t.Fatal(err)
			}
			d, u, err := placement.Place(ctx, placement.Config{}, snap, g)
			if err != nil || d == nil {
				t.Fatalf("not placed: %+v %v", u, err)
			}
			nodeOfRank := make([]string, 16)
			for _, pp := range d.Pods {
				nodeOfRank[rankOf[pp.Name]] = pp.Node
			}
			want := make([]string, 16)
			for r := range want {
				want[r] = nodeOfRank[r-r%4] // the node of the first rank of its four
			}
			if diff := cmp.Diff(want, nodeOfRank); diff != "" {
				t.Errorf("nodes by rank: consecutive ranks split (-want +got):\n%s", diff)
			}
			seen := map[string]bool{}
			for r := 0; r < 16; r += 4 {
				if seen[nodeOfRank[r]] {
					t.Errorf("ranks %d.. share node %s with an earlier group", r, nodeOfRank[r])
				}
				seen[nodeOfRank[r]] = true
			}
		})
	}
}
