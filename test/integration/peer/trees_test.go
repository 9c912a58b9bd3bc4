package peer

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	schedulingv1alpha3 "k8s.io/api/scheduling/v1alpha3"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/gpufabric/gpufabric/pkg/topology"
	"github.com/gpufabric/gpufabric/test/integration/itest"
)

// gpufabric-scheduler's flag that places CompositePodGroup trees (true:
// it fails to start when the apiserver does not serve them), and the
// trees' layout.
const (
	treeSchedulerFlag  = "--composite-pod-groups=true"
	peerLeafNodes      = 128 // nodes per IB leaf in peerNodes
	peerRackNodes      = 16  // nodes per rack = NVLink domain in peerNodes
	treeRootTemplate   = "root"
	treeNoScheduler    = "peer-no-scheduler"
	trapRackCPUs       = "32" // what each trap rack's background pod asks
	trapBackgroundRack = 0    // the trap rack's index in its leaf
)

// treeShape is a CompositePodGroup tree of BenchmarkPeer: a root
// CompositePodGroup (gang: every child) whose topology constraint is the
// IB leaf, over leaf PodGroups created in the order of children, each a
// gang of all its pods with the NVLink domain as its constraint. Both
// schedulers read those constraints from node labels (peerNodes labels
// every node with its leaf and NVLink domain).
//
// trap makes it the greedy trap (see treeTrapWorkload): the even trees'
// children in the order given, the odd trees' reversed; the pods are kept
// to the first trees' leaves by a required node affinity, and each of
// those leaves gets the trap's background before the trees are created.
type treeShape struct {
	children []treeChild
	trap     bool
}

// treeChild is a leaf PodGroup of a tree: pods pods of gpu GPUs each
// (one claim per pod), and its role in the trap's words.
type treeChild struct {
	pods, gpu int
	role      string
}

// pods is the number of pods of one tree.
func (t *treeShape) pods() int {
	n := 0
	for _, c := range t.children {
		n += c.pods
	}
	return n
}

// order is the creation order of tree g's children (indices into
// t.children): as given, or reversed for the odd trees of the trap.
func (t *treeShape) order(g int) []int {
	out := make([]int, len(t.children))
	for i := range out {
		out[i] = i
		if t.trap && g%2 == 1 {
			out[i] = len(out) - 1 - i
		}
	}
	return out
}

// trapped reports whether tree g is of the trap's order (the flexible
// child first).
func (t *treeShape) trapped(g int) bool { return t.trap && g%2 == 0 }

// tree8x16Workload is issue 25's composite: 8 children × 16 pods × 8 GPUs,
// each child a whole NVLink domain (16 nodes), the tree a whole IB leaf
// (8 domains, 128 nodes). One tree; its API floor is that of one
// 128-pod commit of 8 GPUs each.
func tree8x16Workload() peerWorkload {
	children := make([]treeChild, 8)
	for i := range children {
		children[i] = treeChild{pods: 16, gpu: 8, role: "stage"}
	}
	t := &treeShape{children: children}
	return peerWorkload{name: "tree8x16", gangs: 1, pods: t.pods(), gpu: 8, tree: t}
}

// treeTrapWorkload is trees trees of two children, where the greedy
// sibling order of kube-scheduler 1.37 (children by creation time, each
// committed before the next is tried, no backtracking) fails for half of
// them although every tree has a placement:
//
//   - flex: 16 pods × 2 GPUs in one NVLink domain; tight: 16 pods × 4
//     GPUs in one NVLink domain.
//   - The trees' pods may only use the first trees leaves (a required
//     node affinity on the leaf label), and each of those leaves is
//     shaped the same way before the run (trapBackground): its first
//     NVLink domain, the trap rack, has 4 GPUs free on each node (each
//     node runs a 4-GPU pod that asks for half the node's CPUs); its
//     other 7 domains have 3 GPUs free on each node (a 5-GPU pod that
//     asks for no CPU).
//   - tight fits only in a trap rack; flex fits in every domain. A leaf
//     holds exactly one tree (flex in a 3-free domain, tight in the trap
//     rack), so the trees fit exactly, one per leaf.
//   - Even trees create flex first: kube-scheduler places flex in the
//     domain its placement score likes best, and that score
//     (NodeResourcesFit's MostAllocated over CPU and memory, plus the
//     pods placed, the same in every domain) prefers the trap rack, whose
//     CPUs are half requested; tight then fits nowhere in the leaf. Odd
//     trees create tight first: the greedy order places them.
func treeTrapWorkload(trees int) peerWorkload {
	t := &treeShape{trap: true, children: []treeChild{{pods: 16, gpu: 2, role: "flex"}, {pods: 16, gpu: 4, role: "tight"}}}
	return peerWorkload{name: "tree-greedy-trap", gangs: trees, pods: t.pods(), tree: t}
}

// treeChildName is the PodGroup of the k-th child tree creates, and
// treePodName its member j. The names sort in creation order:
// kube-scheduler orders siblings by creation time, then name, and the
// children of a tree are created within the same second.
func treeChildName(tree string, k int) string { return tree + "-" + treeTemplate(k) }
func treePodName(child string, j int) string  { return fmt.Sprintf("%s-%03d", child, j) }

// createPeerTree creates tree g of w in namespace ns for schedulerName:
// its Workload (composite templates), the root CompositePodGroup, the
// children's PodGroups one after the other in the tree's order, then per
// member its claim and pod (the members in parallel, as createPeerGang
// does). All share the cluster's default priority (none is named), as
// kube-scheduler's Priority admission requires of a tree.
func createPeerTree(ctx context.Context, c kubernetes.Interface, ns string, g int, schedulerName string, w peerWorkload, leaves []string) error {
	t, name := w.tree, peerGroupName(g)
	if _, err := c.SchedulingV1beta1().Workloads(ns).Create(ctx, treeWorkload(ns, name, t, g), metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create workload %s: %w", name, err)
	}
	if _, err := c.SchedulingV1alpha3().CompositePodGroups(ns).Create(ctx, treeRoot(ns, name, len(t.children)), metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create composite %s: %w", name, err)
	}
	type member struct {
		child string
		j     int
		gpu   int
	}
	var members []member
	for k, i := range t.order(g) {
		child := treeChildName(name, k)
		if _, err := c.SchedulingV1beta1().PodGroups(ns).Create(ctx, treeLeaf(ns, name, child, t.children[i].pods), metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create podgroup %s: %w", child, err)
		}
		for j := range t.children[i].pods {
			members = append(members, member{child, j, t.children[i].gpu})
		}
	}
	return forEachParallel(ctx, max(1, benchWorkers/w.gangs), len(members), func(ctx context.Context, k int) error {
		m := members[k]
		pod := treePodName(m.child, m.j)
		claim := pod + "-gpu"
		if _, err := c.ResourceV1().ResourceClaims(ns).Create(ctx, itest.GPUClaim(ns, claim, int64(m.gpu)), metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create claim %s: %w", claim, err)
		}
		p := itest.MemberPod(ns, pod, m.child, "gpu", claim)
		p.Spec.SchedulerName = schedulerName
		if len(leaves) > 0 {
			p.Spec.Affinity = leafAffinity(leaves)
		}
		if _, err := c.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create pod %s: %w", pod, err)
		}
		return nil
	})
}

// treeWorkload is tree name's Workload: one composite template (the
// root, gang of all children, in one IB leaf) over one PodGroup template
// per child (gang of all its pods, in one NVLink domain), in the tree's
// order.
func treeWorkload(ns, name string, t *treeShape, g int) *schedulingv1beta1.Workload {
	root := schedulingv1beta1.CompositePodGroupTemplate{
		Name: treeRootTemplate,
		SchedulingPolicy: schedulingv1beta1.CompositePodGroupSchedulingPolicy{
			Gang: &schedulingv1beta1.CompositeGangSchedulingPolicy{MinGroupCount: int32(len(t.children))}},
		SchedulingConstraints: &schedulingv1beta1.CompositePodGroupSchedulingConstraints{
			Topology: []schedulingv1beta1.TopologyConstraint{{Key: benchLeafLabel}}},
	}
	for k, i := range t.order(g) {
		root.PodGroupTemplates = append(root.PodGroupTemplates, schedulingv1beta1.PodGroupTemplate{
			Name: treeTemplate(k),
			SchedulingPolicy: schedulingv1beta1.PodGroupSchedulingPolicy{
				Gang: &schedulingv1beta1.GangSchedulingPolicy{MinCount: int32(t.children[i].pods)}},
			SchedulingConstraints: &schedulingv1beta1.PodGroupSchedulingConstraints{
				Topology: []schedulingv1beta1.TopologyConstraint{{Key: topology.TopologyKeyNVLinkDomain}}},
		})
	}
	return &schedulingv1beta1.Workload{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: schedulingv1beta1.WorkloadSpec{CompositePodGroupTemplates: []schedulingv1beta1.CompositePodGroupTemplate{root}}}
}

// treeTemplate is the k-th child's template name (unique in the
// Workload).
func treeTemplate(k int) string { return "c" + strconv.Itoa(k) }

// treeRoot is tree name's root CompositePodGroup: a gang of all its
// children, in one IB leaf.
func treeRoot(ns, name string, children int) *schedulingv1alpha3.CompositePodGroup {
	return &schedulingv1alpha3.CompositePodGroup{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: schedulingv1alpha3.CompositePodGroupSpec{
			WorkloadRef: &schedulingv1alpha3.WorkloadReference{WorkloadName: name, TemplateName: treeRootTemplate},
			SchedulingPolicy: schedulingv1alpha3.CompositePodGroupSchedulingPolicy{
				Gang: &schedulingv1alpha3.CompositeGangSchedulingPolicy{MinGroupCount: int32(children)}},
			SchedulingConstraints: &schedulingv1alpha3.CompositePodGroupSchedulingConstraints{
				Topology: []schedulingv1alpha3.TopologyConstraint{{Key: benchLeafLabel}}},
		}}
}

// treeLeaf is the PodGroup of child (its name ends in c<i>) of tree: a
// gang of pods pods in one NVLink domain.
func treeLeaf(ns, tree, child string, pods int) *schedulingv1beta1.PodGroup {
	template := child[strings.LastIndex(child, "-")+1:]
	return &schedulingv1beta1.PodGroup{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: child},
		Spec: schedulingv1beta1.PodGroupSpec{
			ParentCompositePodGroupName: ptr.To(tree),
			WorkloadRef:                 &schedulingv1beta1.WorkloadReference{WorkloadName: tree, TemplateName: template},
			SchedulingPolicy: schedulingv1beta1.PodGroupSchedulingPolicy{
				Gang: &schedulingv1beta1.GangSchedulingPolicy{MinCount: int32(pods)}},
			SchedulingConstraints: &schedulingv1beta1.PodGroupSchedulingConstraints{
				Topology: []schedulingv1beta1.TopologyConstraint{{Key: topology.TopologyKeyNVLinkDomain}}},
		}}
}

// leafAffinity requires a node of one of the leaves (their label values).
func leafAffinity(leaves []string) *corev1.Affinity {
	return &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
			MatchExpressions: []corev1.NodeSelectorRequirement{{Key: benchLeafLabel, Operator: corev1.NodeSelectorOpIn, Values: leaves}},
		}}}}}
}

// peerLeafName is the label value of leaf l (peerNodes).
func peerLeafName(l int) string { return fmt.Sprintf("p-l%02d", l) }

// treeRun is what the pods a run's watch saw say of its trees.
type treeRun struct {
	// placed: trees whose pods are all bound; trapPlaced: those of them
	// of the trap's order (treeShape.trapped); within: placed trees whose
	// children are each inside one NVLink domain and all inside one leaf.
	placed, trapPlaced, within int
	// boundAt: per placed tree, when its last pod was observed bound.
	boundAt []time.Time
	// why: what the leaf PodGroups of trees not placed say (treeWhy).
	why string
	// warnings: Warning events on the roots of the placed trees
	// (treeWarnings).
	warnings string
}

// boundTo is the node pod name was observed bound to and when ("" and
// the zero time while it is not).
func (w *podWatch) boundTo(name string) (string, time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if p := w.pods[name]; p != nil {
		return p.Spec.NodeName, w.boundAt[name]
	}
	return "", time.Time{}
}

// treesOf reads w's trees from the watch of their namespace.
func treesOf(pw *podWatch, w peerWorkload) treeRun {
	var r treeRun
	for g := range w.gangs {
		name := peerGroupName(g)
		var last time.Time
		inside, bound := true, true
		leaves := map[int]bool{}
		for k, i := range w.tree.order(g) {
			racks := map[int]bool{}
			for j := range w.tree.children[i].pods {
				node, at := pw.boundTo(treePodName(treeChildName(name, k), j))
				n, err := strconv.Atoi(strings.TrimPrefix(node, "p-n"))
				if node == "" || err != nil {
					bound = false
					continue
				}
				racks[n/peerRackNodes], leaves[n/peerLeafNodes] = true, true
				if at.After(last) {
					last = at
				}
			}
			inside = inside && len(racks) == 1
		}
		if !bound {
			continue
		}
		r.placed++
		r.boundAt = append(r.boundAt, last)
		if w.tree.trapped(g) {
			r.trapPlaced++
		}
		if inside && len(leaves) == 1 {
			r.within++
		}
	}
	return r
}

// trapLeaves are the leaves the trap's trees may use: the first trees
// leaves of peerNodes.
func trapLeaves(trees int) []string {
	out := make([]string, trees)
	for l := range out {
		out[l] = peerLeafName(l)
	}
	return out
}

// trapWait is how long the trap waits after its last create for the
// trees that can still be placed (GPUFABRIC_PEER_TRAP_WAIT_S, default
// 90 s): a scheduler that cannot place a tree keeps retrying it.
func trapWait() time.Duration {
	return time.Duration(envCount("GPUFABRIC_PEER_TRAP_WAIT_S", 90)) * time.Second
}

// trapBackground shapes the trap's leaves in namespace ns (created here;
// the caller deletes it), untimed: on every node of a trap rack (its
// leaf's NVLink domain trapBackgroundRack) a pod with 4 GPUs that asks
// for half the node's CPUs, on every other node of the leaf a pod with 5
// GPUs that asks for none. Each pod is made as a scheduler would bind it
// (its claim allocated on the node and reserved for it, then the binding),
// as no scheduler's pod (treeNoScheduler), and the call returns when kwok
// runs them all.
func trapBackground(b *testing.B, admin kubernetes.Interface, ns string, leaves int) {
	benchNamespace(b, admin, ns)
	n := leaves * peerLeafNodes
	pw := watchPods(b, admin, ns, n)
	err := forEachParallel(b.Context(), benchWorkers, n, func(ctx context.Context, j int) error {
		return trapBackgroundPod(ctx, admin, ns, j)
	})
	itest.Must(b, "create trap background", err)
	pw.wait(b, "trap background running", func(c podCounts) bool { return c.running == n })
}

// trapBackgroundPod is node p-n<j>'s background pod (trapBackground).
func trapBackgroundPod(ctx context.Context, admin kubernetes.Interface, ns string, j int) error {
	node, gpus := fmt.Sprintf("p-n%04d", j), 5
	name := "bg-" + node
	p := itest.MemberPod(ns, name, "", "gpu", name+"-gpu")
	p.Spec.SchedulerName, p.Spec.SchedulingGroup = treeNoScheduler, nil
	if (j%peerLeafNodes)/peerRackNodes == trapBackgroundRack {
		gpus = 4
		p.Spec.Containers[0].Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(trapRackCPUs)}
	}
	p, err := admin.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("create pod %s: %w", name, err)
	}
	c, err := admin.ResourceV1().ResourceClaims(ns).Create(ctx, itest.GPUClaim(ns, name+"-gpu", int64(gpus)), metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("create claim of %s: %w", name, err)
	}
	if err := floorClaimWrite(ctx, admin, c, p, gpuAllocation(node, 0, gpus)); err != nil {
		return err
	}
	bind := &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: p.UID}, Target: corev1.ObjectReference{Kind: "Node", Name: node}}
	if err := admin.CoreV1().Pods(ns).Bind(ctx, bind, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("bind %s: %w", name, err)
	}
	return nil
}
