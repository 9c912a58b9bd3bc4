package composite

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	schedulingv1alpha3 "k8s.io/api/scheduling/v1alpha3"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	"github.com/gpufabric/gpufabric/pkg/gang/scheduler"
	"github.com/gpufabric/gpufabric/pkg/topology"
	"github.com/gpufabric/gpufabric/test/integration/framework"
	"github.com/gpufabric/gpufabric/test/integration/itest"
)

// rackLabel is the node label of the racks, the fabric level above the
// NVLink domain in these tests.
const rackLabel = "example.com/rack"

const keyNVL = topology.TopologyKeyNVLinkDomain

// node is a test node: its NVLink domain (dom-<d>), rack and labels.
type node struct {
	name, domain, rack string
	labels             map[string]string
}

// startPlane starts a control plane with kube-controller-manager and the
// CompositePodGroup gate, the device classes and nodes.
func startPlane(t *testing.T, nodes []node) (*framework.ControlPlane, kubernetes.Interface) {
	t.Helper()
	cp := framework.StartT(t, framework.Options{ControllerManager: true, CompositePodGroups: true})
	admin := cp.AdminClient(t)
	itest.FabricCluster(t, admin, nil, 0, 0) // the device classes
	createNodes(t, admin, nodes)
	return cp, admin
}

// createNodes creates the nodes with 4-GPU slices in their domains.
func createNodes(t *testing.T, admin kubernetes.Interface, nodes []node) {
	t.Helper()
	for _, n := range nodes {
		labels := map[string]string{corev1.LabelHostname: n.name, rackLabel: n.rack}
		for k, v := range n.labels {
			labels[k] = v
		}
		_, err := admin.CoreV1().Nodes().Create(t.Context(), itest.Node(n.name, labels), metav1.CreateOptions{})
		itest.Must(t, "create node", err)
		_, err = admin.ResourceV1().ResourceSlices().Create(t.Context(), itest.GPUSlice(n.name, "dom-"+n.domain, 4), metav1.CreateOptions{})
		itest.Must(t, "create slice", err)
	}
}

// running is a scheduler a test started.
type running struct {
	cancel context.CancelFunc
	done   chan struct{}
	err    error
}

// startScheduler runs gpufabric-scheduler in the test with the shipped
// rules of user, trees on, racks as the level above the NVLink domain;
// with(cfg) may change the rest of its config.
func startScheduler(t *testing.T, cp *framework.ControlPlane, user string, with func(*scheduler.Config)) *running {
	t.Helper()
	itest.Must(t, "grant scheduler rules", framework.GrantSchedulerRules(t.Context(), cp.AdminClient(t), user, itest.RecordNamespace))
	rc, err := cp.UserConfig(user)
	itest.Must(t, "user config", err)
	client, err := kubernetes.NewForConfig(rc)
	itest.Must(t, "client", err)
	ctx, cancel := context.WithCancel(klog.NewContext(t.Context(), ktesting.NewLogger(t, ktesting.NewConfig(ktesting.Verbosity(2)))))
	cfg := scheduler.Config{Client: client, RecordNamespace: itest.RecordNamespace, CompositePodGroups: true,
		Tree: topology.TreeConfig{LabelLevels: []string{rackLabel}}, InitialBackoff: 200 * time.Millisecond, MaxBackoff: 2 * time.Second}
	if with != nil {
		with(&cfg)
	}
	s, err := scheduler.New(cfg)
	itest.Must(t, "create scheduler", err)
	r := &running{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		r.err = s.Run(ctx)
	}()
	t.Cleanup(func() { cancel(); <-r.done })
	return r
}

// tree is a test's tree: the root composite's name, key and
// minGroupCount, and its leaf PodGroups.
type tree struct {
	ns, name, key string
	min           int32
	leaves        []leaf
}

// leaf is a leaf PodGroup: its name, key, minCount and pods.
type leaf struct {
	name, key string
	min       int32
	pods      int
	selector  map[string]string
	workload  string // spec.workloadRef's workload ("": the tree's)
	// channel: the PodGroup claims a fabric-domain channel from the
	// namespace's template (kube-controller-manager creates it) and its
	// pods name it.
	channel bool
}

// create creates the root CompositePodGroup, its leaves and their pods
// (each with its own 4-GPU claim from the namespace's template).
func (tr tree) create(t *testing.T, admin kubernetes.Interface) {
	t.Helper()
	ctx := t.Context()
	cpg := &schedulingv1alpha3.CompositePodGroup{ObjectMeta: metav1.ObjectMeta{Namespace: tr.ns, Name: tr.name},
		Spec: schedulingv1alpha3.CompositePodGroupSpec{
			WorkloadRef:      &schedulingv1alpha3.WorkloadReference{WorkloadName: tr.name, TemplateName: tr.name},
			SchedulingPolicy: schedulingv1alpha3.CompositePodGroupSchedulingPolicy{Gang: &schedulingv1alpha3.CompositeGangSchedulingPolicy{MinGroupCount: tr.min}},
		}}
	if tr.key != "" {
		cpg.Spec.SchedulingConstraints = &schedulingv1alpha3.CompositePodGroupSchedulingConstraints{Topology: []schedulingv1alpha3.TopologyConstraint{{Key: tr.key}}}
	}
	_, err := admin.SchedulingV1alpha3().CompositePodGroups(tr.ns).Create(ctx, cpg, metav1.CreateOptions{})
	itest.Must(t, "create compositepodgroup", err)
	for _, l := range tr.leaves {
		tr.createLeaf(t, admin, l)
	}
}

func (tr tree) createLeaf(t *testing.T, admin kubernetes.Interface, l leaf) {
	t.Helper()
	ctx := t.Context()
	workload := l.workload
	if workload == "" {
		workload = tr.name
	}
	pg := &schedulingv1beta1.PodGroup{ObjectMeta: metav1.ObjectMeta{Namespace: tr.ns, Name: l.name},
		Spec: schedulingv1beta1.PodGroupSpec{
			ParentCompositePodGroupName: ptr.To(tr.name),
			WorkloadRef:                 &schedulingv1beta1.WorkloadReference{WorkloadName: workload, TemplateName: l.name},
			SchedulingPolicy:            schedulingv1beta1.PodGroupSchedulingPolicy{Gang: &schedulingv1beta1.GangSchedulingPolicy{MinCount: l.min}},
		}}
	if l.key != "" {
		pg.Spec.SchedulingConstraints = &schedulingv1beta1.PodGroupSchedulingConstraints{Topology: []schedulingv1beta1.TopologyConstraint{{Key: l.key}}}
	}
	if l.channel {
		pg.Spec.ResourceClaims = itest.TemplateGroup(tr.ns, l.name, l.min).Spec.ResourceClaims
	}
	_, err := admin.SchedulingV1beta1().PodGroups(tr.ns).Create(ctx, pg, metav1.CreateOptions{})
	itest.Must(t, "create podgroup", err)
	for i := range l.pods {
		createPod(t, admin, tr.ns, l, i)
	}
}

// createPod creates pod i of leaf l, with its own 4-GPU claim.
func createPod(t *testing.T, admin kubernetes.Interface, ns string, l leaf, i int) {
	t.Helper()
	p := itest.TemplatePod(ns, fmt.Sprintf("%s-%d", l.name, i), l.name)
	if !l.channel {
		p.Spec.ResourceClaims = p.Spec.ResourceClaims[1:] // no fabric channel
		p.Spec.Containers[0].Resources.Claims = p.Spec.Containers[0].Resources.Claims[1:]
	}
	p.Spec.NodeSelector = l.selector
	_, err := admin.CoreV1().Pods(ns).Create(t.Context(), p, metav1.CreateOptions{})
	itest.Must(t, "create pod", err)
}

// placement is where a namespace's pods run: pod → node ("" unbound).
func placement(ctx context.Context, admin kubernetes.Interface, ns string) (map[string]string, error) {
	pods, err := admin.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, p := range pods.Items {
		out[p.Name] = p.Spec.NodeName
	}
	return out, nil
}

// waitBound waits until every pod of ns is bound and returns where.
func waitBound(t *testing.T, admin kubernetes.Interface, ns string, pods int) map[string]string {
	t.Helper()
	var where map[string]string
	itest.Poll(t, "tree bound", 60*time.Second, func(ctx context.Context) error {
		var err error
		if where, err = placement(ctx, admin, ns); err != nil {
			return err
		}
		bound := 0
		for _, n := range where {
			if n != "" {
				bound++
			}
		}
		if bound != pods || len(where) != pods {
			return fmt.Errorf("%d of %d pods bound: %v", bound, pods, where)
		}
		return nil
	})
	return where
}

// conditionIs checks a leaf's PodGroupInitiallyScheduled condition.
func conditionIs(ctx context.Context, admin kubernetes.Interface, ns, name string, status metav1.ConditionStatus, contains string) error {
	pg, err := admin.SchedulingV1beta1().PodGroups(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	c := meta.FindStatusCondition(pg.Status.Conditions, schedulingv1beta1.PodGroupInitiallyScheduled)
	if c == nil || c.Status != status || !strings.Contains(c.Message, contains) {
		return fmt.Errorf("podgroup %s: condition %+v, want %s containing %q", name, c, status, contains)
	}
	return nil
}

// eventOn finds an event of reason on the object named name whose note
// contains text.
func eventOn(ctx context.Context, admin kubernetes.Interface, ns, name, reason, text string) error {
	evs, err := admin.EventsV1().Events(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	for _, e := range evs.Items {
		if e.Regarding.Name == name && e.Reason == reason && strings.Contains(e.Note, text) {
			return nil
		}
	}
	return fmt.Errorf("no %s event on %s containing %q", reason, name, text)
}
