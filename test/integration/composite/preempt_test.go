package composite

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	schedulingv1alpha3 "k8s.io/api/scheduling/v1alpha3"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/gpufabric/gpufabric/pkg/gang/vocab"
	"github.com/gpufabric/gpufabric/test/integration/framework"
	"github.com/gpufabric/gpufabric/test/integration/itest"
)

// TestCompositePreemption on one control plane with the CompositePodGroup
// gate, kube-controller-manager and kwok: racks r0 (NVLink domains a, b)
// and r1 (c, d), two 4-GPU nodes a domain, every pod asking 4 GPUs;
// priority classes batch (100), research (500) and production (1000).
//
//  1. A research gang and a batch gang (disruptionMode all) fill a rack
//     each. A production tree that needs a whole rack (two leaves of two
//     pods, each leaf in one NVLink domain) preempts the batch gang, not
//     the research one, and is placed in its rack; the events name the
//     tree, and the nomination record is gone.
//  2. With the research gang gone, a batch tree whose root says
//     disruptionMode all fills that rack. A production gang that needs one
//     NVLink domain evicts the whole tree, both leaves (also the one in the
//     domain it does not use), and is placed; the leaves get
//     DisruptionTarget naming the gang, the root a Preempted event.
func TestCompositePreemption(t *testing.T) {
	cp := framework.StartT(t, framework.Options{ControllerManager: true, Kwok: true, CompositePodGroups: true})
	admin := cp.AdminClient(t)
	ctx := t.Context()
	itest.FabricCluster(t, admin, nil, 0, 0) // the device classes
	kwokRacks(t, admin, map[string]string{"a": "r0", "b": "r0", "c": "r1", "d": "r1"})
	for name, value := range map[string]int32{"batch": 100, "research": 500, "production": 1000} {
		_, err := admin.SchedulingV1().PriorityClasses().Create(ctx, &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Value: value}, metav1.CreateOptions{})
		itest.Must(t, "create priority class", err)
	}
	const ns = "pre"
	itest.GangNamespace(t, admin, ns, 4)
	startScheduler(t, cp, "gpufabric-scheduler", nil)

	// 1. A tree preempts a flat gang.
	group{ns: ns, name: "keep", class: "research", key: rackLabel, pods: 4}.create(t, admin)
	keepRack := rackOf(waitPods(t, admin, ns, "keep-", 4))
	group{ns: ns, name: "filler", class: "batch", key: rackLabel, pods: 4, whole: true}.create(t, admin)
	fillerRack := rackOf(waitPods(t, admin, ns, "filler-", 4))
	if keepRack == fillerRack || keepRack == "" || fillerRack == "" {
		t.Fatalf("keep in %q, filler in %q: want a rack each", keepRack, fillerRack)
	}
	composite{ns: ns, name: "train", class: "production", key: rackLabel, min: 2}.create(t, admin)
	for _, l := range []string{"enc", "dec"} {
		group{ns: ns, name: l, class: "production", key: keyNVL, pods: 2, parent: "train"}.create(t, admin)
	}
	trainAt := waitPods(t, admin, ns, "", 0, "enc-", "dec-")
	if got := rackOf(trainAt); got != fillerRack {
		t.Fatalf("the tree placed %v (rack %q), want the batch gang's rack %s", trainAt, got, fillerRack)
	}
	gone(t, admin, ns, "filler-")
	if got := rackOf(waitPods(t, admin, ns, "keep-", 4)); got != keepRack {
		t.Errorf("the research gang moved to %q", got)
	}
	for _, check := range []struct{ name, reason, note string }{
		{"train", vocab.EventPreempting, "preempting 1 workloads of priority 100 or lower (4 pods, 16 devices) to place the tree in " + rackLabel + " " + fillerRack},
		{"filler", vocab.EventPreempted, "preempted by CompositePodGroup pre/train (priority 1000)"},
		{"train", vocab.EventScheduled, "placed 4 pods of 2 PodGroups"},
	} {
		itest.Poll(t, check.reason+" on "+check.name, 30*time.Second, func(ctx context.Context) error {
			return eventOn(ctx, admin, ns, check.name, check.reason, check.note)
		})
	}
	disruptedBy(t, admin, ns, "filler", "CompositePodGroup pre/train")
	itest.Poll(t, "nomination record gone", 30*time.Second, noNominations(admin))

	// 2. A tree whose root says all is evicted whole.
	deleteGroup(t, admin, ns, "keep", 4)
	composite{ns: ns, name: "sim", class: "batch", key: rackLabel, min: 2, whole: true}.create(t, admin)
	for _, l := range []string{"p", "q"} {
		group{ns: ns, name: l, class: "batch", key: keyNVL, pods: 2, parent: "sim"}.create(t, admin)
	}
	if got := rackOf(waitPods(t, admin, ns, "", 0, "p-", "q-")); got != keepRack {
		t.Fatalf("the batch tree in rack %q, want the free rack %s", got, keepRack)
	}
	group{ns: ns, name: "urgent", class: "production", key: keyNVL, pods: 2}.create(t, admin)
	if got := rackOf(waitPods(t, admin, ns, "urgent-", 2)); got != keepRack {
		t.Errorf("urgent in rack %q, want %s (the other rack runs the production tree)", got, keepRack)
	}
	gone(t, admin, ns, "p-", "q-")
	if got := rackOf(waitPods(t, admin, ns, "", 0, "enc-", "dec-")); got != fillerRack {
		t.Errorf("the production tree moved to %q", got)
	}
	for _, leaf := range []string{"p", "q"} {
		disruptedBy(t, admin, ns, leaf, "PodGroup pre/urgent")
	}
	itest.Poll(t, "Preempted on the root", 30*time.Second, func(ctx context.Context) error {
		return eventOn(ctx, admin, ns, "sim", vocab.EventPreempted, "preempted by PodGroup pre/urgent (priority 1000)")
	})
	itest.Poll(t, "Preempting on urgent", 30*time.Second, func(ctx context.Context) error {
		return eventOn(ctx, admin, ns, "urgent", vocab.EventPreempting, "preempting 1 workloads of priority 100 or lower (4 pods, 16 devices) to place the gang")
	})
	itest.Poll(t, "nomination record gone", 30*time.Second, noNominations(admin))
}

// kwokRacks creates two kwok nodes with a 4-GPU slice per NVLink domain
// (domain → rack) and waits until they are ready.
func kwokRacks(t *testing.T, admin kubernetes.Interface, racks map[string]string) {
	t.Helper()
	var names []string
	for d, rack := range racks {
		for i := range 2 {
			name := fmt.Sprintf("%s-%d", d, i)
			n := itest.Node(name, map[string]string{corev1.LabelHostname: name, rackLabel: rack})
			n.Annotations = map[string]string{framework.KwokNodeAnnotation: "fake"}
			_, err := admin.CoreV1().Nodes().Create(t.Context(), n, metav1.CreateOptions{})
			itest.Must(t, "create node", err)
			_, err = admin.ResourceV1().ResourceSlices().Create(t.Context(), itest.GPUSlice(name, "dom-"+d, 4), metav1.CreateOptions{})
			itest.Must(t, "create slice", err)
			names = append(names, name)
		}
	}
	itest.Poll(t, "kwok nodes ready", 60*time.Second, func(ctx context.Context) error {
		for _, name := range names {
			n, err := admin.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if !itest.NodeReady(n) || len(n.Spec.Taints) > 0 {
				return fmt.Errorf("node %s not ready or tainted %v", name, n.Spec.Taints)
			}
		}
		return nil
	})
}

// rackOf is the rack all the nodes of where are in ("" mixed or none):
// nodes are named <domain>-<i>, domains a and b in r0, c and d in r1.
func rackOf(where map[string]string) string {
	rack := ""
	for _, node := range where {
		r := "r1"
		if strings.HasPrefix(node, "a-") || strings.HasPrefix(node, "b-") {
			r = "r0"
		}
		if rack != "" && rack != r {
			return ""
		}
		rack = r
	}
	return rack
}

// composite is a test's CompositePodGroup: a root at a priority class.
type composite struct {
	ns, name, class, key string
	min                  int32
	whole                bool
}

func (c composite) create(t *testing.T, admin kubernetes.Interface) {
	t.Helper()
	cpg := &schedulingv1alpha3.CompositePodGroup{ObjectMeta: metav1.ObjectMeta{Namespace: c.ns, Name: c.name},
		Spec: schedulingv1alpha3.CompositePodGroupSpec{
			WorkloadRef:           &schedulingv1alpha3.WorkloadReference{WorkloadName: c.name, TemplateName: c.name},
			SchedulingPolicy:      schedulingv1alpha3.CompositePodGroupSchedulingPolicy{Gang: &schedulingv1alpha3.CompositeGangSchedulingPolicy{MinGroupCount: c.min}},
			SchedulingConstraints: &schedulingv1alpha3.CompositePodGroupSchedulingConstraints{Topology: []schedulingv1alpha3.TopologyConstraint{{Key: c.key}}},
			PriorityClassName:     c.class,
		}}
	if c.whole {
		cpg.Spec.DisruptionMode = &schedulingv1alpha3.CompositeDisruptionMode{All: &schedulingv1alpha3.AllCompositeDisruptionMode{}}
	}
	_, err := admin.SchedulingV1alpha3().CompositePodGroups(c.ns).Create(t.Context(), cpg, metav1.CreateOptions{})
	itest.Must(t, "create compositepodgroup", err)
}

// group is a test's PodGroup (a leaf of parent, or a flat gang) with its
// pods, each with its own 4-GPU claim, at a priority class.
type group struct {
	ns, name, class, key, parent string
	pods                         int
	whole                        bool
}

func (g group) create(t *testing.T, admin kubernetes.Interface) {
	t.Helper()
	pg := &schedulingv1beta1.PodGroup{ObjectMeta: metav1.ObjectMeta{Namespace: g.ns, Name: g.name},
		Spec: schedulingv1beta1.PodGroupSpec{
			SchedulingPolicy:      schedulingv1beta1.PodGroupSchedulingPolicy{Gang: &schedulingv1beta1.GangSchedulingPolicy{MinCount: int32(g.pods)}},
			SchedulingConstraints: &schedulingv1beta1.PodGroupSchedulingConstraints{Topology: []schedulingv1beta1.TopologyConstraint{{Key: g.key}}},
			PriorityClassName:     g.class,
		}}
	if g.parent != "" {
		pg.Spec.ParentCompositePodGroupName = ptr.To(g.parent)
		pg.Spec.WorkloadRef = &schedulingv1beta1.WorkloadReference{WorkloadName: g.parent, TemplateName: g.name}
	}
	if g.whole {
		pg.Spec.DisruptionMode = &schedulingv1beta1.DisruptionMode{All: &schedulingv1beta1.AllDisruptionMode{}}
	}
	_, err := admin.SchedulingV1beta1().PodGroups(g.ns).Create(t.Context(), pg, metav1.CreateOptions{})
	itest.Must(t, "create podgroup", err)
	for i := range g.pods {
		p := itest.TemplatePod(g.ns, fmt.Sprintf("%s-%d", g.name, i), g.name)
		p.Spec.ResourceClaims = p.Spec.ResourceClaims[1:] // no fabric channel
		p.Spec.Containers[0].Resources.Claims = p.Spec.Containers[0].Resources.Claims[1:]
		p.Spec.PriorityClassName = g.class
		_, err := admin.CoreV1().Pods(g.ns).Create(t.Context(), p, metav1.CreateOptions{})
		itest.Must(t, "create pod", err)
	}
}

// waitPods waits until the pods of ns named with prefix (or any of more)
// are bound and running, n of them (0: as many as exist, at least one),
// and returns where they run.
func waitPods(t *testing.T, admin kubernetes.Interface, ns, prefix string, n int, more ...string) map[string]string {
	t.Helper()
	prefixes := append([]string{prefix}, more...)
	if prefix == "" {
		prefixes = more
	}
	var where map[string]string
	itest.Poll(t, fmt.Sprintf("pods %v running", prefixes), 90*time.Second, func(ctx context.Context) error {
		pods, err := admin.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		where = map[string]string{}
		total := 0
		for _, p := range pods.Items {
			if !hasPrefix(p.Name, prefixes) || p.DeletionTimestamp != nil {
				continue
			}
			total++
			if p.Spec.NodeName != "" && p.Status.Phase == corev1.PodRunning {
				where[p.Name] = p.Spec.NodeName
			}
		}
		if len(where) == 0 || len(where) != total || n > 0 && total != n {
			return fmt.Errorf("%d of %d pods running: %v", len(where), total, where)
		}
		return nil
	})
	return where
}

func hasPrefix(name string, prefixes []string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// gone waits until no pod of ns named with one of prefixes is left.
func gone(t *testing.T, admin kubernetes.Interface, ns string, prefixes ...string) {
	t.Helper()
	itest.Poll(t, fmt.Sprintf("pods %v evicted", prefixes), 60*time.Second, func(ctx context.Context) error {
		pods, err := admin.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		for _, p := range pods.Items {
			if hasPrefix(p.Name, prefixes) {
				return fmt.Errorf("victim %s still there", p.Name)
			}
		}
		return nil
	})
}

// deleteGroup deletes a flat gang's pods, then its PodGroup, and waits
// until the pods are gone.
func deleteGroup(t *testing.T, admin kubernetes.Interface, ns, name string, pods int) {
	t.Helper()
	for i := range pods {
		err := admin.CoreV1().Pods(ns).Delete(t.Context(), fmt.Sprintf("%s-%d", name, i), metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
		itest.Must(t, "delete pod", err)
	}
	itest.Must(t, "delete podgroup", admin.SchedulingV1beta1().PodGroups(ns).Delete(t.Context(), name, metav1.DeleteOptions{}))
	gone(t, admin, ns, name+"-")
}

// disruptedBy waits for a PodGroup's DisruptionTarget condition naming
// the preemptor.
func disruptedBy(t *testing.T, admin kubernetes.Interface, ns, name, preemptor string) {
	t.Helper()
	itest.Poll(t, "DisruptionTarget on "+name, 30*time.Second, func(ctx context.Context) error {
		pg, err := admin.SchedulingV1beta1().PodGroups(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		c := meta.FindStatusCondition(pg.Status.Conditions, schedulingv1beta1.DisruptionTarget)
		if c == nil || c.Status != metav1.ConditionTrue || c.Reason != schedulingv1beta1.PodGroupReasonPreemptionByScheduler || !strings.Contains(c.Message, "preempted by "+preemptor) {
			return fmt.Errorf("condition %+v, want True/PreemptionByScheduler naming %s", c, preemptor)
		}
		return nil
	})
}

// noNominations: no nomination record is left in the scheduler's namespace.
func noNominations(c kubernetes.Interface) func(context.Context) error {
	return func(ctx context.Context) error {
		cms, err := c.CoreV1().ConfigMaps(itest.RecordNamespace).List(ctx, metav1.ListOptions{LabelSelector: vocab.LabelNomination + "=true"})
		if err != nil {
			return err
		}
		if len(cms.Items) > 0 {
			return fmt.Errorf("%d nomination records left", len(cms.Items))
		}
		return nil
	}
}
