package peer

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/gpufabric/gpufabric/test/integration/itest"
)

// peerWorkload is one shape of BenchmarkPeer: gangs of pods, each pod with
// its own claim for gpu GPUs; key, when set, is the PodGroup's required
// topology level (a node label both schedulers know).
type peerWorkload struct {
	name             string
	gangs, pods, gpu int
	key              string
	// within names the unit the benchmark checks each gang landed in (one
	// NVLink domain of 16 nodes, or one leaf of 128), span its nodes; span
	// 0: no check (the gang spans leaves).
	within string
	span   int
	// tree, when set, makes each gang a CompositePodGroup tree of pods
	// pods (trees_test.go); gpu is then that of the floor's shape.
	tree *treeShape
}

// peerWorkloads is BenchmarkPeer's catalogue, in run order: the small-gang
// shape (smallGangs gangs of 3 one-GPU pods; selected as "small"), then
// one gang of 64 or 512 pods of 1 or 8 GPUs, without a constraint and with
// the tightest level that can hold it (a rack = NVLink domain of 16 nodes
// holds 64 GPUs × 2, a leaf of 128 nodes holds 64 whole nodes). 512×8 GPUs
// needs 512 whole nodes, more than a leaf: no constrained variant. Then
// the CompositePodGroup trees (trees_test.go): tree8x16 and
// tree-greedy-trap (trapTrees trees).
func peerWorkloads(smallGangs, trapTrees int) []peerWorkload {
	const domain, leaf = "NVLink domain", "leaf"
	return []peerWorkload{
		{name: fmt.Sprintf("%dx3x1gpu", smallGangs), gangs: smallGangs, pods: 3, gpu: 1, within: domain, span: 16},
		{name: "64x1gpu", gangs: 1, pods: 64, gpu: 1, within: domain, span: 16},
		{name: "64x1gpu-rack", gangs: 1, pods: 64, gpu: 1, key: benchRackLabel, within: domain, span: 16},
		{name: "64x8gpu", gangs: 1, pods: 64, gpu: 8, within: leaf, span: 128},
		{name: "64x8gpu-leaf", gangs: 1, pods: 64, gpu: 8, key: benchLeafLabel, within: leaf, span: 128},
		{name: "512x1gpu", gangs: 1, pods: 512, gpu: 1, within: leaf, span: 128},
		{name: "512x1gpu-leaf", gangs: 1, pods: 512, gpu: 1, key: benchLeafLabel, within: leaf, span: 128},
		{name: "512x8gpu", gangs: 1, pods: 512, gpu: 8},
		tree8x16Workload(),
		treeTrapWorkload(trapTrees),
	}
}

// selectPeerWorkloads is the catalogue (GPUFABRIC_PEER_SMALL_GANGS gangs in
// the small shape, default 300; GPUFABRIC_PEER_TRAP_TREES trees in
// tree-greedy-trap, default 4) filtered by GPUFABRIC_PEER_WORKLOADS (a
// comma list of names, "small" for the small shape, "trees" for both tree
// workloads; unset: all but the trees, which turn kube-scheduler's
// CompositePodGroup gate on, see peerCluster), less the workloads that
// cannot fit on nodes nodes (logged).
func selectPeerWorkloads(b *testing.B, nodes int) []peerWorkload {
	all := peerWorkloads(envCount("GPUFABRIC_PEER_SMALL_GANGS", 300), envCount("GPUFABRIC_PEER_TRAP_TREES", 4))
	var names []string
	for _, w := range all {
		names = append(names, w.name)
	}
	var want []string
	if v := strings.TrimSpace(os.Getenv("GPUFABRIC_PEER_WORKLOADS")); v != "" {
		want = strings.Split(v, ",")
	}
	for _, n := range want {
		if n = strings.TrimSpace(n); n != "small" && n != "trees" && !slices.Contains(names, n) {
			b.Fatalf("GPUFABRIC_PEER_WORKLOADS: unknown workload %q (have small, %s, trees)", n, strings.Join(names[1:], ", "))
		}
	}
	var out []peerWorkload
	for i, w := range all {
		picked := len(want) == 0 && w.tree == nil || slices.ContainsFunc(want, func(n string) bool {
			n = strings.TrimSpace(n)
			return n == w.name || (i == 0 && n == "small") || (w.tree != nil && n == "trees")
		})
		switch {
		case !picked:
		case !w.fits(nodes):
			b.Logf("skipping %s: does not fit on %d nodes", w.name, nodes)
		default:
			out = append(out, w)
		}
	}
	if len(out) == 0 {
		b.Fatalf("no workload selected")
	}
	return out
}

// fits reports whether the workload fits on nodes empty nodes (peerNodes'
// layout), its gangs in their required unit; a tree needs a whole IB
// leaf of its own.
func (w peerWorkload) fits(nodes int) bool {
	if w.tree != nil {
		return w.gangs <= nodes/peerLeafNodes
	}
	unit := nodes
	switch w.key {
	case benchRackLabel:
		unit = min(16, nodes)
	case benchLeafLabel:
		unit = min(128, nodes)
	}
	return w.gangs*w.pods*w.gpu <= nodes*benchGPUs && w.pods*w.gpu <= unit*benchGPUs
}

// peerGroupName and peerPodName name gang g and its member j.
func peerGroupName(g int) string             { return fmt.Sprintf("g%04d", g) }
func peerPodName(group string, j int) string { return fmt.Sprintf("%s-%03d", group, j) }

// gangsWithin counts the gangs whose pods are all bound to nodes of one
// unit of w.span nodes (peerNodes numbers them p-nXXXX, 16 per NVLink
// domain, 128 per leaf).
func gangsWithin(pw *podWatch, w peerWorkload) int {
	if w.span == 0 {
		return 0
	}
	n := 0
	for g := range w.gangs {
		domains := map[int]bool{}
		for j := range w.pods {
			p := pw.pod(peerPodName(peerGroupName(g), j))
			if p == nil || p.Spec.NodeName == "" {
				domains[-1] = true
				continue
			}
			i, err := strconv.Atoi(strings.TrimPrefix(p.Spec.NodeName, "p-n"))
			if err != nil {
				domains[-2] = true
				continue
			}
			domains[i/w.span] = true
		}
		if len(domains) == 1 && !domains[-1] && !domains[-2] {
			n++
		}
	}
	return n
}

// createPeerGang creates a PodGroup and then, per member, its claim and
// pod; the members in parallel, on benchWorkers/w.gangs workers (all of
// them for one big gang, one each when many gangs are created at once).
func createPeerGang(ctx context.Context, c kubernetes.Interface, ns, group, schedulerName string, w peerWorkload) error {
	pg := &schedulingv1beta1.PodGroup{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: group},
		Spec: schedulingv1beta1.PodGroupSpec{SchedulingPolicy: schedulingv1beta1.PodGroupSchedulingPolicy{
			Gang: &schedulingv1beta1.GangSchedulingPolicy{MinCount: int32(w.pods)}}}}
	if w.key != "" {
		pg.Spec.SchedulingConstraints = &schedulingv1beta1.PodGroupSchedulingConstraints{Topology: []schedulingv1beta1.TopologyConstraint{{Key: w.key}}}
	}
	if _, err := c.SchedulingV1beta1().PodGroups(ns).Create(ctx, pg, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create podgroup %s: %w", group, err)
	}
	return forEachParallel(ctx, max(1, benchWorkers/w.gangs), w.pods, func(ctx context.Context, j int) error {
		name := peerPodName(group, j)
		claim := name + "-gpu"
		if _, err := c.ResourceV1().ResourceClaims(ns).Create(ctx, itest.GPUClaim(ns, claim, int64(w.gpu)), metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create claim %s: %w", claim, err)
		}
		p := itest.MemberPod(ns, name, group, "gpu", claim)
		p.Spec.SchedulerName = schedulerName
		if _, err := c.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create pod %s: %w", p.Name, err)
		}
		return nil
	})
}
