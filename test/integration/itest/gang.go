package itest

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/gpufabric/gpufabric/pkg/gang/vocab"
	"github.com/gpufabric/gpufabric/pkg/topology"
	"github.com/gpufabric/gpufabric/test/integration/framework"
)

// Gangs of the scheduler tests: a namespace with claim templates, PodGroups
// and members that claim from them, and what the API holds once the
// scheduler acted.

// RecordNamespace is the scheduler's own namespace in the tests: its commit
// records (and, in some tests, its Lease).
const RecordNamespace = "gpufabric-system"

// Template names used by the scheduler tests.
const (
	FabricTemplate = "fabric"
	GPUTemplate    = "gpus"
)

// GangNamespace creates a namespace with its default ServiceAccount and the
// claim templates: fabric (one fabric-domain channel) and gpus (gpusPerPod
// GPUs).
func GangNamespace(t *testing.T, c kubernetes.Interface, ns string, gpusPerPod int64) {
	t.Helper()
	ctx := t.Context()
	_, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	Must(t, "create namespace", err)
	Must(t, "create service account", framework.EnsureServiceAccount(ctx, c, ns))
	for _, tpl := range []*resourceapi.ResourceClaimTemplate{
		ClaimTemplate(ns, FabricTemplate, topology.FabricDomainDeviceClass, 1),
		ClaimTemplate(ns, GPUTemplate, topology.GPUDeviceClass, gpusPerPod),
	} {
		_, err := c.ResourceV1().ResourceClaimTemplates(ns).Create(ctx, tpl, metav1.CreateOptions{})
		Must(t, "create claim template", err)
	}
}

// ClaimTemplate is a claim template in ns for count devices of class.
func ClaimTemplate(ns, name, class string, count int64) *resourceapi.ResourceClaimTemplate {
	return &resourceapi.ResourceClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: resourceapi.ResourceClaimTemplateSpec{Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{
			Requests: []resourceapi.DeviceRequest{{Name: "req", Exactly: &resourceapi.ExactDeviceRequest{
				DeviceClassName: class, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: count,
			}}},
		}}},
	}
}

// TemplateGroup is a PodGroup of minCount in one nvlinkDomain whose shared
// fabric claim comes from the fabric template.
func TemplateGroup(ns, name string, minCount int32) *schedulingv1beta1.PodGroup {
	return &schedulingv1beta1.PodGroup{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: schedulingv1beta1.PodGroupSpec{
			SchedulingPolicy: schedulingv1beta1.PodGroupSchedulingPolicy{Gang: &schedulingv1beta1.GangSchedulingPolicy{MinCount: minCount}},
			SchedulingConstraints: &schedulingv1beta1.PodGroupSchedulingConstraints{
				Topology: []schedulingv1beta1.TopologyConstraint{{Key: string(topology.Qualified(topology.AttrNVLinkDomain))}},
			},
			ResourceClaims: []schedulingv1beta1.PodGroupResourceClaim{{Name: FabricTemplate, ResourceClaimTemplateName: ptr.To(FabricTemplate)}},
		},
	}
}

// TemplatePod is a member of group: the group's fabric claim (same name and
// template, so it resolves to the PodGroup's claim) and its own GPU claim.
func TemplatePod(ns, name, group string) *corev1.Pod {
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
				Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: FabricTemplate}, {Name: GPUTemplate}}},
			}},
			ResourceClaims: []corev1.PodResourceClaim{
				{Name: FabricTemplate, ResourceClaimTemplateName: ptr.To(FabricTemplate)},
				{Name: GPUTemplate, ResourceClaimTemplateName: ptr.To(GPUTemplate)},
			},
		},
	}
}

// CreateGang creates a PodGroup and n members named <group>-<i>.
func CreateGang(t *testing.T, c kubernetes.Interface, ns, group string, minCount int32, n int) {
	t.Helper()
	_, err := c.SchedulingV1beta1().PodGroups(ns).Create(t.Context(), TemplateGroup(ns, group, minCount), metav1.CreateOptions{})
	Must(t, "create podgroup", err)
	for i := range n {
		CreateMember(t, c, ns, group, i)
	}
}

// CreateMember creates member i of group, named <group>-<i>.
func CreateMember(t *testing.T, c kubernetes.Interface, ns, group string, i int) {
	t.Helper()
	_, err := c.CoreV1().Pods(ns).Create(t.Context(), TemplatePod(ns, fmt.Sprintf("%s-%d", group, i), group), metav1.CreateOptions{})
	Must(t, "create pod", err)
}

// CreateSinglePod creates a pod without a PodGroup with its own GPU claim.
func CreateSinglePod(t *testing.T, c kubernetes.Interface, ns, name string) {
	t.Helper()
	p := TemplatePod(ns, name, "")
	p.Spec.SchedulingGroup = nil
	p.Spec.ResourceClaims = p.Spec.ResourceClaims[1:]
	p.Spec.Containers[0].Resources.Claims = p.Spec.Containers[0].Resources.Claims[1:]
	_, err := c.CoreV1().Pods(ns).Create(t.Context(), p, metav1.CreateOptions{})
	Must(t, "create pod", err)
}

// GangState is what the API holds for one namespace's gang.
type GangState struct {
	Pods    []corev1.Pod
	Claims  []resourceapi.ResourceClaim
	Groups  []schedulingv1beta1.PodGroup
	Records []string // commit records of the namespace's PodGroups
}

// ReadGang reads namespace ns's pods (sorted by name), claims and
// PodGroups, and which PodGroups have a commit record.
func ReadGang(ctx context.Context, c kubernetes.Interface, ns string) (*GangState, error) {
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
	st := &GangState{Pods: pods.Items, Claims: claims.Items, Groups: groups.Items}
	for _, g := range groups.Items {
		_, err := c.CoreV1().ConfigMaps(RecordNamespace).Get(ctx, vocab.RecordName(g.UID), metav1.GetOptions{})
		switch {
		case err == nil:
			st.Records = append(st.Records, g.Name)
		case !apierrors.IsNotFound(err):
			return nil, err
		}
	}
	sort.Slice(st.Pods, func(i, j int) bool { return st.Pods[i].Name < st.Pods[j].Name })
	return st, nil
}

// Bound counts the pods bound to a node.
func (st *GangState) Bound() int {
	n := 0
	for _, p := range st.Pods {
		if p.Spec.NodeName != "" {
			n++
		}
	}
	return n
}

// Allocated counts the allocated claims.
func (st *GangState) Allocated() int {
	n := 0
	for _, c := range st.Claims {
		if c.Status.Allocation != nil {
			n++
		}
	}
	return n
}

// Consistent checks the commit invariants of one namespace: every allocated
// claim is reserved, every reservation names a live consumer (the PodGroup,
// or a bound pod), and no commit record is left when requireDone.
func (st *GangState) Consistent(requireDone bool) error {
	var errs []error
	podByUID := map[string]corev1.Pod{}
	for _, p := range st.Pods {
		podByUID[string(p.UID)] = p
	}
	groupUIDs := map[string]bool{}
	for _, g := range st.Groups {
		groupUIDs[string(g.UID)] = true
	}
	if requireDone && len(st.Records) > 0 {
		errs = append(errs, fmt.Errorf("podgroups %v keep their commit records", st.Records))
	}
	for _, c := range st.Claims {
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

// DevicesAllocatedTwice lists devices held by more than one claim anywhere.
func DevicesAllocatedTwice(ctx context.Context, c kubernetes.Interface) ([]string, error) {
	claims, err := c.ResourceV1().ResourceClaims("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	owner := map[string]string{}
	var dup []string
	for _, cl := range claims.Items {
		if cl.Status.Allocation == nil || cl.Namespace == RecordNamespace && cl.Labels[vocab.HoldLabel] != "" {
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
