package faults

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	schedulingv1alpha3 "k8s.io/api/scheduling/v1alpha3"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/gpufabric/gpufabric/pkg/gang/vocab"
	"github.com/gpufabric/gpufabric/pkg/inspect"
	"github.com/gpufabric/gpufabric/pkg/topology"
	"github.com/gpufabric/gpufabric/test/integration/framework"
	"github.com/gpufabric/gpufabric/test/integration/itest"
)

// treeLeaves are the leaves of a tree case: a CompositePodGroup "svc"
// over PodGroups prefill and decode, each 2 members of 4 GPUs in one
// NVLink domain, each member from an Indexed Job of the leaf's name.
var treeLeaves = []string{"decode", "prefill"}

// treeCase is a tree under a node fault.
type treeCase struct {
	faultCase
	// all: the root composite's disruptionMode is All.
	all bool
	// victim is the leaf and rank whose node fails.
	victimLeaf string
	victimRank int
	// minGroups is the root's minGroupCount (0: both leaves).
	minGroups int32
	// sizes: members per leaf (absent: 2); wholeLeaf: a leaf whose own
	// disruptionMode is All; leafDomain: a leaf's pods select that domain
	// (letter); later: a domain cordoned until the tree runs, then opened
	// (letter, "": none).
	sizes      map[string]int
	wholeLeaf  string
	leafDomain map[string]string
	later      string
}

// size is the members of leaf.
func (c *treeCase) size(leaf string) int { return cmp.Or(c.sizes[leaf], 2) }

// treeCases: two NVLink domains of 3 nodes, so each leaf has a spare node
// in its domain.
var treeCases = []*treeCase{
	// A leaf's member on a NotReady node is replaced in place, in its
	// leaf's domain; the rest of the tree keeps running.
	{faultCase: faultCase{name: "treeleaf", domains: []int{3, 3}, fault: itest.FaultNotReady}, victimLeaf: "prefill", victimRank: 1},
	// Under a composite disrupted only whole, a member deleted by the
	// taint manager restarts every leaf under it.
	{faultCase: faultCase{name: "treeall", domains: []int{3, 3}, fault: itest.FaultTaint}, all: true, victimLeaf: "decode", victimRank: 0},
	// Two full domains: the prefill leaf (policy Fail, 5 s) finds no
	// replacement and fails; decode goes on (minGroupCount 1), and the
	// failed leaf is not placed again once its node is repaired.
	{faultCase: faultCase{name: "treefail", domains: []int{2, 2}, fault: itest.FaultTaint, policy: vocab.PolicyFail, timeout: 5 * time.Second},
		victimLeaf: "prefill", victimRank: 0, minGroups: 1},
	// A leaf disrupted only whole (3 members) runs in a (5 nodes), decode
	// in b; c (3 nodes) opens once the tree runs. After the fault prefill
	// restarts whole back in a (4 nodes left), not in c, which best fit
	// alone would choose: a restarted leaf goes back to its previous
	// domain. Policy Wait keeps it there however long its old claims take
	// to be released (a restart waits for them at most 15 s).
	{faultCase: faultCase{name: "treeback", domains: []int{5, 2, 3}, fault: itest.FaultTaint, policy: vocab.PolicyWait, timeout: 90 * time.Second},
		victimLeaf: "prefill", victimRank: 0,
		sizes: map[string]int{"prefill": 3}, wholeLeaf: "prefill", leafDomain: map[string]string{"decode": "b"}, later: "c"},
}

// TestTreeFaults: the trees' Jobs run; then, at once, each case's fault
// hits one member: a Pod-mode leaf is replaced in place in its domain
// (MembersLost ReplacedInPlace on the leaf, its sibling untouched); under
// a composite whose disruptionMode is All every leaf restarts whole (all
// new pods, DisruptionTarget GangRestarted on each leaf); a leaf whose
// own disruptionMode is All restarts whole back in its previous domain
// though a tighter one opened meanwhile; and no device is ever allocated
// twice.
func TestTreeFaults(t *testing.T) {
	cp := framework.StartT(t, framework.Options{ControllerManager: true, Kwok: true, CompositePodGroups: true, NodeMonitorGracePeriod: nodeMonitorGrace})
	admin := cp.AdminClient(t)
	itest.FabricCluster(t, admin, nil, 0, 0) // the device classes
	var nodes []string
	for _, c := range treeCases {
		nodes = append(nodes, caseNodes(t, admin, &c.faultCase)...)
		itest.GangNamespace(t, admin, c.name, gpusPerNode)
	}
	waitNodesReady(t, admin, nodes)
	for _, c := range treeCases {
		cordonDomain(t, admin, c, true)
	}
	startScheduler(t, cp)
	for _, c := range treeCases {
		createTree(t, admin, c)
	}
	ctx, stop := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	wg.Go(func() { watchInvariants(ctx, t, admin) })
	var cases sync.WaitGroup
	for _, c := range treeCases {
		cases.Go(func() { t.Run(c.name, func(t *testing.T) { runTreeCase(t, admin, c) }) })
	}
	cases.Wait()
	stop()
	wg.Wait()
}

// createTree creates case c's root CompositePodGroup, its leaves and
// their Indexed Jobs.
func createTree(t *testing.T, admin kubernetes.Interface, c *treeCase) {
	t.Helper()
	ctx, ns := t.Context(), c.name
	root := &schedulingv1alpha3.CompositePodGroup{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "svc"},
		Spec: schedulingv1alpha3.CompositePodGroupSpec{
			WorkloadRef:      &schedulingv1alpha3.WorkloadReference{WorkloadName: "svc", TemplateName: "svc"},
			SchedulingPolicy: schedulingv1alpha3.CompositePodGroupSchedulingPolicy{Gang: &schedulingv1alpha3.CompositeGangSchedulingPolicy{MinGroupCount: cmp.Or(c.minGroups, 2)}},
		}}
	if c.all {
		root.Spec.DisruptionMode = &schedulingv1alpha3.CompositeDisruptionMode{All: &schedulingv1alpha3.AllCompositeDisruptionMode{}}
	}
	_, err := admin.SchedulingV1alpha3().CompositePodGroups(ns).Create(ctx, root, metav1.CreateOptions{})
	itest.Must(t, "create compositepodgroup", err)
	for _, leaf := range treeLeaves {
		pg := &schedulingv1beta1.PodGroup{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: leaf},
			Spec: schedulingv1beta1.PodGroupSpec{
				ParentCompositePodGroupName: ptr.To("svc"),
				WorkloadRef:                 &schedulingv1beta1.WorkloadReference{WorkloadName: "svc", TemplateName: leaf},
				SchedulingPolicy:            schedulingv1beta1.PodGroupSchedulingPolicy{Gang: &schedulingv1beta1.GangSchedulingPolicy{MinCount: 2}},
				SchedulingConstraints: &schedulingv1beta1.PodGroupSchedulingConstraints{
					Topology: []schedulingv1beta1.TopologyConstraint{{Key: topology.TopologyKeyNVLinkDomain}},
				},
			}}
		if leaf == c.victimLeaf && c.policy != "" {
			pg.Annotations = map[string]string{vocab.AnnotationOnMemberLoss: c.policy, vocab.AnnotationReplacementTimeout: c.timeout.String()}
		}
		if leaf == c.wholeLeaf {
			pg.Spec.DisruptionMode = &schedulingv1beta1.DisruptionMode{All: &schedulingv1beta1.AllDisruptionMode{}}
		}
		pg.Spec.SchedulingPolicy.Gang.MinCount = int32(c.size(leaf))
		_, err := admin.SchedulingV1beta1().PodGroups(ns).Create(ctx, pg, metav1.CreateOptions{})
		itest.Must(t, "create podgroup", err)
		pod := itest.TemplatePod(ns, "", leaf)
		pod.Spec.Tolerations = nil // the fault taints must evict them
		pod.Spec.RestartPolicy = corev1.RestartPolicyNever
		pod.Spec.NodeSelector = map[string]string{caseLabel: c.name}
		if d := c.leafDomain[leaf]; d != "" {
			pod.Spec.NodeSelector[domainLabel] = c.name + d
		}
		pod.Spec.ResourceClaims = pod.Spec.ResourceClaims[1:] // no fabric channel
		pod.Spec.Containers[0].Resources.Claims = pod.Spec.Containers[0].Resources.Claims[1:]
		job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: leaf},
			Spec: batchv1.JobSpec{Parallelism: ptr.To(int32(c.size(leaf))), Completions: ptr.To(int32(c.size(leaf))), CompletionMode: ptr.To(batchv1.IndexedCompletion),
				BackoffLimit: ptr.To[int32](20), Template: corev1.PodTemplateSpec{Spec: pod.Spec}}}
		_, err = admin.BatchV1().Jobs(ns).Create(ctx, job, metav1.CreateOptions{})
		itest.Must(t, "create job", err)
	}
}

// treePods are a tree case's live pods (neither terminating nor
// terminal) by "leaf/rank".
type treePods map[string]*corev1.Pod

func readTree(ctx context.Context, admin kubernetes.Interface, ns string) (treePods, error) {
	pods, err := admin.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	out := treePods{}
	for i := range pods.Items {
		p := &pods.Items[i]
		rank, live, err := liveRank(p)
		if err != nil {
			return nil, err
		}
		if !live {
			continue
		}
		k := fmt.Sprintf("%s/%d", p.Labels[batchv1.JobNameLabel], rank)
		if o := out[k]; o != nil {
			return nil, fmt.Errorf("two live pods of %s: %s and %s", k, o.Name, p.Name)
		}
		out[k] = p
	}
	return out, nil
}

// running says why case c's tree does not run whole (every member's live
// pod bound, each leaf in one NVLink domain), if it does not.
func (tp treePods) running(c *treeCase) error {
	for _, leaf := range treeLeaves {
		doms := map[string]bool{}
		for r := range c.size(leaf) {
			p := tp[fmt.Sprintf("%s/%d", leaf, r)]
			if p == nil || p.Spec.NodeName == "" {
				return fmt.Errorf("%s/%d not bound: %s", leaf, r, tp)
			}
			doms[itest.DomainOf(p.Spec.NodeName)] = true
		}
		if len(doms) != 1 {
			return fmt.Errorf("leaf %s in domains %v", leaf, slices.Sorted(maps.Keys(doms)))
		}
	}
	return nil
}

func (tp treePods) String() string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(tp)) {
		parts = append(parts, fmt.Sprintf("%s=%s@%s", k, tp[k].Name, tp[k].Spec.NodeName))
	}
	return fmt.Sprint(parts)
}

func (tp treePods) uids() map[string]types.UID {
	out := map[string]types.UID{}
	for k, p := range tp {
		out[k] = p.UID
	}
	return out
}

// waitTree polls until case c's tree runs whole and check accepts it.
func waitTree(t *testing.T, admin kubernetes.Interface, c *treeCase, what string, check func(treePods) error) treePods {
	t.Helper()
	var out treePods
	itest.Poll(t, what, replacementTimeout+60*time.Second, func(ctx context.Context) error {
		tp, err := readTree(ctx, admin, c.name)
		if err == nil {
			err = tp.running(c)
		}
		if err == nil && check != nil {
			err = check(tp)
		}
		out = tp
		return err
	})
	return out
}

// runTreeCase waits for the tree, injects the fault and checks what
// follows.
func runTreeCase(t *testing.T, admin kubernetes.Interface, c *treeCase) {
	before := waitTree(t, admin, c, "tree running", nil)
	cordonDomain(t, admin, c, false)
	victimKey := fmt.Sprintf("%s/%d", c.victimLeaf, c.victimRank)
	victim := before[victimKey]
	node, domain := victim.Spec.NodeName, itest.DomainOf(victim.Spec.NodeName)
	start := time.Now()
	itest.Must(t, "node fault", itest.InjectNodeFault(t.Context(), admin, node, c.fault))
	t.Logf("%s: %s (%s) on %s in %s, tree %s", c.fault, victimKey, victim.Name, node, domain, before)
	old := before.uids()
	if c.policy == vocab.PolicyFail {
		failedLeaf(t, admin, c, before, node, domain)
		return
	}
	if c.wholeLeaf != "" {
		restartedLeaf(t, admin, c, before, node, domain)
		t.Logf("faults: %s %s → leaf %s restarted whole: fault→all bound %s", c.name, c.fault, c.wholeLeaf, since(start))
		return
	}
	if !c.all {
		after := waitTree(t, admin, c, "replaced in place", func(tp treePods) error {
			for k, uid := range tp.uids() {
				if (k == victimKey) == (uid == old[k]) {
					return fmt.Errorf("%s: same pod %v, want a new pod only for %s: %s", k, uid == old[k], victimKey, tp)
				}
			}
			return nil
		})
		p := after[victimKey]
		if d := itest.DomainOf(p.Spec.NodeName); d != domain || p.Spec.NodeName == node {
			t.Errorf("the replacement %s runs on %s in %s, want another node of its leaf's domain %s", p.Name, p.Spec.NodeName, d, domain)
		}
		itest.Poll(t, "MembersLost ReplacedInPlace on the leaf", 20*time.Second, func(ctx context.Context) error {
			return leafCondition(ctx, admin, c.name, c.victimLeaf, vocab.ConditionMembersLost, metav1.ConditionFalse, vocab.ReasonReplacedInPlace)
		})
		t.Logf("faults: %s %s → in_place: fault→all bound %s", c.name, c.fault, since(start))
		return
	}
	after := waitTree(t, admin, c, "restarted whole", func(tp treePods) error {
		for k, uid := range tp.uids() {
			if uid == old[k] {
				return fmt.Errorf("%s is still the same pod: %s", k, tp)
			}
		}
		return nil
	})
	for k, p := range after {
		if p.Spec.NodeName == node {
			t.Errorf("restarted member %s (%s) on the failed node %s", k, p.Name, node)
		}
	}
	for _, leaf := range treeLeaves {
		itest.Poll(t, "DisruptionTarget GangRestarted on "+leaf, 20*time.Second, func(ctx context.Context) error {
			return leafCondition(ctx, admin, c.name, leaf, schedulingv1beta1.DisruptionTarget, metav1.ConditionFalse, vocab.ReasonGangRestarted)
		})
	}
	t.Logf("faults: %s %s → restarted: fault→all bound %s", c.name, c.fault, since(start))
}

// restartedLeaf: the victim's leaf, disrupted only whole, restarts whole
// (every member a new pod, DisruptionTarget GangRestarted) back in its
// previous NVLink domain, off the failed node; its sibling keeps running,
// the same pods.
func restartedLeaf(t *testing.T, admin kubernetes.Interface, c *treeCase, before treePods, node, domain string) {
	t.Helper()
	old := before.uids()
	after := waitTree(t, admin, c, "the leaf restarted whole", func(tp treePods) error {
		for k, uid := range tp.uids() {
			leaf, _, _ := strings.Cut(k, "/")
			if (leaf == c.wholeLeaf) == (uid == old[k]) {
				return fmt.Errorf("%s: same pod %v, want new pods for %s only: %s", k, uid == old[k], c.wholeLeaf, tp)
			}
		}
		return nil
	})
	for r := range c.size(c.wholeLeaf) {
		p := after[fmt.Sprintf("%s/%d", c.wholeLeaf, r)]
		if d := itest.DomainOf(p.Spec.NodeName); d != domain || p.Spec.NodeName == node {
			t.Errorf("restarted %s runs on %s in %s, want another node of its previous domain %s: %s", p.Name, p.Spec.NodeName, d, domain, after)
		}
	}
	itest.Poll(t, "DisruptionTarget GangRestarted on "+c.wholeLeaf, 20*time.Second, func(ctx context.Context) error {
		return leafCondition(ctx, admin, c.name, c.wholeLeaf, schedulingv1beta1.DisruptionTarget, metav1.ConditionFalse, vocab.ReasonGangRestarted)
	})
}

// cordonDomain cordons (on) or opens case c's later domain, if it has
// one; opened, it waits until its nodes are schedulable and untainted.
func cordonDomain(t *testing.T, admin kubernetes.Interface, c *treeCase, on bool) {
	t.Helper()
	if c.later == "" {
		return
	}
	d := c.name + c.later
	var names []string
	for j := range c.domains[c.later[0]-'a'] {
		name := fmt.Sprintf("%s-%d", d, j)
		patch := fmt.Appendf(nil, `{"spec":{"unschedulable":%t}}`, on)
		_, err := admin.CoreV1().Nodes().Patch(t.Context(), name, types.MergePatchType, patch, metav1.PatchOptions{})
		itest.Must(t, "cordon node", err)
		names = append(names, name)
	}
	if !on {
		waitNodesReady(t, admin, names)
	}
}

// failedLeaf: the victim's leaf fails (Failed=True NoReplacement) and its
// members are evicted; its sibling keeps running, the same pods. Once the
// failed node is repaired (room for the whole leaf again) and a sibling
// member is deleted (its replacement makes the tree try again), the
// sibling runs whole again and the failed leaf's recreated pods still are
// not placed.
func failedLeaf(t *testing.T, admin kubernetes.Interface, c *treeCase, before treePods, node, domain string) {
	t.Helper()
	itest.Poll(t, "the leaf Failed", 60*time.Second, func(ctx context.Context) error {
		return leafCondition(ctx, admin, c.name, c.victimLeaf, vocab.ConditionFailed, metav1.ConditionTrue, vocab.ReasonNoReplacement)
	})
	cl, err := inspect.Load(t.Context(), admin, inspect.Need{Namespace: c.name, Fabric: true, Claims: true, Pods: true, PodGroups: true})
	itest.Must(t, "load cluster", err)
	rep, err := inspect.BuildExplain(cl, inspect.Options{}, c.name, c.victimLeaf, 0)
	itest.Must(t, "explain", err)
	if rep.State != inspect.StateFailed {
		t.Errorf("kubectl gpufabric explain %s: state %s, want %s", c.victimLeaf, rep.State, inspect.StateFailed)
	}
	sibling := treeLeaves[0]
	if sibling == c.victimLeaf {
		sibling = treeLeaves[1]
	}
	// unbound: no pod of the failed leaf is bound, the sibling runs
	// (the same pods while same).
	unbound := func(ctx context.Context, same bool) error {
		tp, err := readTree(ctx, admin, c.name)
		if err != nil {
			return err
		}
		for r := range c.size(sibling) {
			k := fmt.Sprintf("%s/%d", sibling, r)
			if p := tp[k]; p == nil || p.Spec.NodeName == "" || same && p.UID != before[k].UID {
				return fmt.Errorf("%s is not running (the same pod: %v): %s", k, same, tp)
			}
			if p := tp[fmt.Sprintf("%s/%d", c.victimLeaf, r)]; p != nil && p.Spec.NodeName != "" {
				return fmt.Errorf("%s of the failed leaf is bound: %s", p.Name, tp)
			}
		}
		return nil
	}
	itest.Poll(t, "the failed leaf's members evicted, its sibling running", 30*time.Second, func(ctx context.Context) error { return unbound(ctx, true) })
	binds := watchBinds(t, admin, c.name, c.victimLeaf)
	itest.Must(t, "repair node", itest.RepairNode(t.Context(), admin, node, "dom-"+domain, gpusPerNode, c.fault))
	// The Job recreates the failed leaf's pods after its back-off (10 s).
	itest.Poll(t, "the failed leaf's pods recreated", 60*time.Second, func(ctx context.Context) error {
		tp, err := readTree(ctx, admin, c.name)
		if err != nil {
			return err
		}
		for r := range c.size(c.victimLeaf) {
			if tp[fmt.Sprintf("%s/%d", c.victimLeaf, r)] == nil {
				return fmt.Errorf("%s/%d not recreated yet: %s", c.victimLeaf, r, tp)
			}
		}
		return unbound(ctx, true)
	})
	gone := before[sibling+"/1"]
	itest.Must(t, "delete a sibling member", admin.CoreV1().Pods(c.name).Delete(t.Context(), gone.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}))
	itest.Poll(t, "the sibling's member replaced", 60*time.Second, func(ctx context.Context) error {
		tp, err := readTree(ctx, admin, c.name)
		if err != nil {
			return err
		}
		if p := tp[sibling+"/1"]; p == nil || p.UID == gone.UID || p.Spec.NodeName == "" {
			return fmt.Errorf("%s/1 not replaced yet: %s", sibling, tp)
		}
		return unbound(ctx, false)
	})
	time.Sleep(3 * time.Second) // the tree's attempts after the sibling's
	if b := binds(); len(b) > 0 {
		t.Errorf("pods of the failed leaf %s were bound after it failed: %v", c.victimLeaf, b)
	}
	t.Logf("faults: %s %s → failed leaf %s, sibling %s running", c.name, c.fault, c.victimLeaf, sibling)
}

// watchBinds watches the pods of Job job in ns from now; the function it
// returns stops the watch and lists each pod it saw bound to a node, of
// those that did not exist when it started.
func watchBinds(t *testing.T, admin kubernetes.Interface, ns, job string) func() []string {
	t.Helper()
	sel := batchv1.JobNameLabel + "=" + job
	list, err := admin.CoreV1().Pods(ns).List(t.Context(), metav1.ListOptions{LabelSelector: sel})
	itest.Must(t, "list pods", err)
	w, err := admin.CoreV1().Pods(ns).Watch(t.Context(), metav1.ListOptions{LabelSelector: sel, ResourceVersion: list.ResourceVersion})
	itest.Must(t, "watch pods", err)
	old := map[types.UID]bool{}
	for _, p := range list.Items {
		old[p.UID] = true
	}
	var mu sync.Mutex
	bound := map[string]bool{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			if p, ok := ev.Object.(*corev1.Pod); ok && p.Spec.NodeName != "" && !old[p.UID] {
				mu.Lock()
				bound[p.Name+"@"+p.Spec.NodeName] = true
				mu.Unlock()
			}
		}
	}()
	return func() []string {
		w.Stop()
		<-done
		mu.Lock()
		defer mu.Unlock()
		return slices.Sorted(maps.Keys(bound))
	}
}

// leafCondition checks a leaf PodGroup's condition of type typ.
func leafCondition(ctx context.Context, admin kubernetes.Interface, ns, leaf, typ string, status metav1.ConditionStatus, reason string) error {
	pg, err := admin.SchedulingV1beta1().PodGroups(ns).Get(ctx, leaf, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if cond := meta.FindStatusCondition(pg.Status.Conditions, typ); cond == nil || cond.Status != status || cond.Reason != reason {
		return fmt.Errorf("%s %s: %+v, want %s %s", leaf, typ, cond, status, reason)
	}
	return nil
}
