package integration

import (
	"context"
	"errors"
	"fmt"
	"github.com/gpufabric/gpufabric/pkg/gang/vocab"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	"github.com/gpufabric/gpufabric/pkg/gang/placement/placementtest"
	"github.com/gpufabric/gpufabric/pkg/gang/scheduler"
	"github.com/gpufabric/gpufabric/pkg/topology"
	"github.com/gpufabric/gpufabric/test/integration/framework"
)

// Builders and helpers of the scheduler tests.

// Template names used by the scheduler tests.
const (
	fabricTemplate = "fabric"
	gpuTemplate    = "gpus"
)

// fabricCluster creates nodes with a kubernetes.io/hostname label and a
// node-local slice of gpus GPUs each: domains × nodesPer nodes named
// <domain>-<i>, in NVLink domain dom-<domain>. Plus both device classes.
func fabricCluster(t *testing.T, c kubernetes.Interface, domains []string, nodesPer, gpus int) {
	t.Helper()
	ctx := t.Context()
	for _, dc := range []*resourceapi.DeviceClass{
		schedDeviceClass(topology.GPUDeviceClass, placementtest.GPUSelector),
		schedDeviceClass(topology.FabricDomainDeviceClass, placementtest.FabricDomainSelector),
	} {
		if _, err := c.ResourceV1().DeviceClasses().Create(ctx, dc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("create device class: %v", err)
		}
	}
	for _, d := range domains {
		for i := range nodesPer {
			name := fmt.Sprintf("%s-%d", d, i)
			_, err := c.CoreV1().Nodes().Create(ctx, node(name, map[string]string{corev1.LabelHostname: name}), metav1.CreateOptions{})
			must(t, "create node", err)
			_, err = c.ResourceV1().ResourceSlices().Create(ctx, gpuSlice(name, "dom-"+d, gpus), metav1.CreateOptions{})
			must(t, "create slice", err)
		}
	}
}

func schedDeviceClass(name, expr string) *resourceapi.DeviceClass {
	return &resourceapi.DeviceClass{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: expr}}}},
	}
}

// gangNamespace creates a namespace with its default ServiceAccount and the
// claim templates: fabric (one fabric-domain channel) and gpus (gpusPerPod
// GPUs).
func gangNamespace(t *testing.T, c kubernetes.Interface, ns string, gpusPerPod int64) {
	t.Helper()
	ctx := t.Context()
	_, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	must(t, "create namespace", err)
	must(t, "create service account", framework.EnsureServiceAccount(ctx, c, ns))
	for _, tpl := range []*resourceapi.ResourceClaimTemplate{
		schedClaimTemplate(ns, fabricTemplate, topology.FabricDomainDeviceClass, 1),
		schedClaimTemplate(ns, gpuTemplate, topology.GPUDeviceClass, gpusPerPod),
	} {
		_, err := c.ResourceV1().ResourceClaimTemplates(ns).Create(ctx, tpl, metav1.CreateOptions{})
		must(t, "create claim template", err)
	}
}

func schedClaimTemplate(ns, name, class string, count int64) *resourceapi.ResourceClaimTemplate {
	return &resourceapi.ResourceClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: resourceapi.ResourceClaimTemplateSpec{Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{
			Requests: []resourceapi.DeviceRequest{{Name: "req", Exactly: &resourceapi.ExactDeviceRequest{
				DeviceClassName: class, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: count,
			}}},
		}}},
	}
}

// templateGroup is a PodGroup of minCount in one nvlinkDomain whose shared
// fabric claim comes from the fabric template.
func templateGroup(ns, name string, minCount int32) *schedulingv1beta1.PodGroup {
	return &schedulingv1beta1.PodGroup{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: schedulingv1beta1.PodGroupSpec{
			SchedulingPolicy: schedulingv1beta1.PodGroupSchedulingPolicy{Gang: &schedulingv1beta1.GangSchedulingPolicy{MinCount: minCount}},
			SchedulingConstraints: &schedulingv1beta1.PodGroupSchedulingConstraints{
				Topology: []schedulingv1beta1.TopologyConstraint{{Key: string(topology.Qualified(topology.AttrNVLinkDomain))}},
			},
			ResourceClaims: []schedulingv1beta1.PodGroupResourceClaim{{Name: fabricTemplate, ResourceClaimTemplateName: ptr.To(fabricTemplate)}},
		},
	}
}

// templatePod is a member of group: the group's fabric claim (same name and
// template, so it resolves to the PodGroup's claim) and its own GPU claim.
func templatePod(ns, name, group string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.PodSpec{
			SchedulerName:   topology.SchedulerName,
			SchedulingGroup: &corev1.PodSchedulingGroup{PodGroupName: ptr.To(group)},
			// kube-controller-manager taints the kubelet-less nodes
			// unreachable after ~40 s; the tests' pods do not care.
			Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
			Containers: []corev1.Container{{
				Name: "train", Image: "registry.example/train:1",
				Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: fabricTemplate}, {Name: gpuTemplate}}},
			}},
			ResourceClaims: []corev1.PodResourceClaim{
				{Name: fabricTemplate, ResourceClaimTemplateName: ptr.To(fabricTemplate)},
				{Name: gpuTemplate, ResourceClaimTemplateName: ptr.To(gpuTemplate)},
			},
		},
	}
}

// createGang creates a PodGroup and n members named <group>-<i>.
func createGang(t *testing.T, c kubernetes.Interface, ns, group string, minCount int32, n int) {
	t.Helper()
	_, err := c.SchedulingV1beta1().PodGroups(ns).Create(t.Context(), templateGroup(ns, group, minCount), metav1.CreateOptions{})
	must(t, "create podgroup", err)
	for i := range n {
		createMember(t, c, ns, group, i)
	}
}

// createSinglePod creates a pod without a PodGroup with its own GPU claim.
func createSinglePod(t *testing.T, c kubernetes.Interface, ns, name string) {
	t.Helper()
	p := templatePod(ns, name, "")
	p.Spec.SchedulingGroup = nil
	p.Spec.ResourceClaims = p.Spec.ResourceClaims[1:]
	p.Spec.Containers[0].Resources.Claims = p.Spec.Containers[0].Resources.Claims[1:]
	_, err := c.CoreV1().Pods(ns).Create(t.Context(), p, metav1.CreateOptions{})
	must(t, "create pod", err)
}

func createMember(t *testing.T, c kubernetes.Interface, ns, group string, i int) {
	t.Helper()
	_, err := c.CoreV1().Pods(ns).Create(t.Context(), templatePod(ns, fmt.Sprintf("%s-%d", group, i), group), metav1.CreateOptions{})
	must(t, "create pod", err)
}

// runningScheduler is a Scheduler running in the test process.
type runningScheduler struct {
	cancel context.CancelFunc
	done   chan struct{}
	err    error
}

// startScheduler runs a Scheduler with the shipped RBAC rules' client until
// stop (or the test's end). cfg.Client is set here.
func startScheduler(t *testing.T, client kubernetes.Interface, cfg scheduler.Config) *runningScheduler {
	t.Helper()
	logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.Verbosity(2)))
	ctx, cancel := context.WithCancel(klog.NewContext(t.Context(), logger))
	cfg.Client = client
	if cfg.RecordNamespace == "" {
		cfg.RecordNamespace = recordNamespace
	}
	if cfg.InitialBackoff == 0 {
		cfg.InitialBackoff, cfg.MaxBackoff = 200*time.Millisecond, 2*time.Second
	}
	s, err := scheduler.New(cfg)
	must(t, "create scheduler", err)
	rs := &runningScheduler{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(rs.done)
		rs.err = s.Run(ctx)
	}()
	t.Cleanup(rs.stop)
	return rs
}

// stop cancels the scheduler and waits for it.
func (rs *runningScheduler) stop() {
	rs.cancel()
	<-rs.done
}

// recordNamespace is the scheduler's own namespace in the tests: its commit
// records (and, in some tests, its Lease).
const recordNamespace = "gpufabric-system"

// schedulerClient returns a client with exactly the shipped scheduler rules
// (the namespaced ones in recordNamespace).
func schedulerClient(t *testing.T, cp *framework.ControlPlane, user string) kubernetes.Interface {
	t.Helper()
	must(t, "grant scheduler rules", framework.GrantSchedulerRules(t.Context(), cp.AdminClient(t), user, recordNamespace))
	cfg, err := cp.UserConfig(user)
	must(t, "user config", err)
	c, err := kubernetes.NewForConfig(cfg)
	must(t, "client for "+user, err)
	return c
}

// poll waits until cond returns nil, and fails the test with its last error.
func poll(t *testing.T, what string, timeout time.Duration, cond func(context.Context) error) {
	t.Helper()
	var last error
	err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		err := cond(ctx)
		if err == nil || ctx.Err() == nil || last == nil {
			last = err // keep the last real answer over the deadline's
		}
		return err == nil, nil
	})
	if err != nil {
		t.Fatalf("%s: %v (last: %v)", what, err, last)
	}
}

// gangState is what the API holds for one namespace's gang.
type gangState struct {
	pods    []corev1.Pod
	claims  []resourceapi.ResourceClaim
	groups  []schedulingv1beta1.PodGroup
	records []string // commit records of the namespace's PodGroups
}

func readGang(ctx context.Context, c kubernetes.Interface, ns string) (*gangState, error) {
	pods, err := c.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	claims, err := c.ResourceV1().ResourceClaims(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	groups, err := c.SchedulingV1beta1().PodGroups(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	st := &gangState{pods: pods.Items, claims: claims.Items, groups: groups.Items}
	for _, g := range groups.Items {
		_, err := c.CoreV1().ConfigMaps(recordNamespace).Get(ctx, vocab.RecordName(g.UID), metav1.GetOptions{})
		switch {
		case err == nil:
			st.records = append(st.records, g.Name)
		case !apierrors.IsNotFound(err):
			return nil, err
		}
	}
	sort.Slice(st.pods, func(i, j int) bool { return st.pods[i].Name < st.pods[j].Name })
	return st, nil
}

func (st *gangState) bound() int {
	n := 0
	for _, p := range st.pods {
		if p.Spec.NodeName != "" {
			n++
		}
	}
	return n
}

func (st *gangState) allocated() int {
	n := 0
	for _, c := range st.claims {
		if c.Status.Allocation != nil {
			n++
		}
	}
	return n
}

// consistent checks the commit invariants of one namespace: every allocated
// claim is reserved, every reservation names a live consumer (the PodGroup,
// or a bound pod), and no commit record is left when requireDone.
func (st *gangState) consistent(requireDone bool) error {
	var errs []error
	podByUID := map[string]corev1.Pod{}
	for _, p := range st.pods {
		podByUID[string(p.UID)] = p
	}
	groupUIDs := map[string]bool{}
	for _, g := range st.groups {
		groupUIDs[string(g.UID)] = true
	}
	if requireDone && len(st.records) > 0 {
		errs = append(errs, fmt.Errorf("podgroups %v keep their commit records", st.records))
	}
	for _, c := range st.claims {
		if c.Status.Allocation == nil {
			if len(c.Status.ReservedFor) > 0 {
				errs = append(errs, fmt.Errorf("claim %s reserved but not allocated", c.Name))
			}
			continue
		}
		if len(c.Status.ReservedFor) == 0 {
			errs = append(errs, fmt.Errorf("claim %s allocated but reserved for nobody (leak)", c.Name))
		}
		for _, r := range c.Status.ReservedFor {
			switch r.Resource {
			case "podgroups":
				if !groupUIDs[string(r.UID)] {
					errs = append(errs, fmt.Errorf("claim %s reserved for unknown podgroup %s", c.Name, r.Name))
				}
			case "pods":
				if p, ok := podByUID[string(r.UID)]; !ok || p.Spec.NodeName == "" {
					errs = append(errs, fmt.Errorf("claim %s reserved for pod %s, which is unbound or gone", c.Name, r.Name))
				}
			}
		}
	}
	return errors.Join(errs...)
}

// devicesAllocatedTwice lists devices held by more than one claim anywhere.
func devicesAllocatedTwice(ctx context.Context, c kubernetes.Interface) ([]string, error) {
	claims, err := c.ResourceV1().ResourceClaims("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	owner := map[string]string{}
	var dup []string
	for _, cl := range claims.Items {
		if cl.Status.Allocation == nil || cl.Namespace == recordNamespace && cl.Labels[vocab.HoldLabel] != "" {
			continue // holds repeat their claims' devices
		}
		for _, r := range cl.Status.Allocation.Devices.Results {
			id := r.Pool + "/" + r.Device
			if o, ok := owner[id]; ok {
				dup = append(dup, fmt.Sprintf("%s in %s and %s/%s", id, o, cl.Namespace, cl.Name))
			}
			owner[id] = cl.Namespace + "/" + cl.Name
		}
	}
	return dup, nil
}

// domainOf returns the NVLink domain of a node named <domain>-<i>.
func schedDomainOf(nodeName string) string {
	d, _, _ := strings.Cut(nodeName, "-")
	return "dom-" + d
}
