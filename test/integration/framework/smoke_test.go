package framework_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	rbacv1 "k8s.io/api/rbac/v1"
	resourceapi "k8s.io/api/resource/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/gpufabric/gpufabric/pkg/topology"
	"github.com/gpufabric/gpufabric/test/integration/framework"
	"github.com/gpufabric/gpufabric/test/integration/itest"
)

// TestSmoke proves the control plane serves what gpufabric builds on: the
// 1.37 gates keep every field of our objects, and the scheduler's shipped
// RBAC rules (and only with resourceclaims/binding) can reserve a claim for a
// PodGroup.
func TestSmoke(t *testing.T) {
	cp := framework.StartT(t, framework.Options{})
	ctx := t.Context()
	admin := cp.AdminClient(t)
	const ns = metav1.NamespaceDefault

	n, err := admin.CoreV1().Nodes().Create(ctx, itest.Node("gpu-node-0", map[string]string{"rack": "r1"}), metav1.CreateOptions{})
	itest.Must(t, "create node", err)
	dc, err := admin.ResourceV1().DeviceClasses().Create(ctx, itest.GPUDeviceClass(), metav1.CreateOptions{})
	itest.Must(t, "create device class", err)
	wantSlice := itest.GPUSlice(n.Name, "0f4f6d8a-5a3c-4c43-9d0e-1c1b5e0e7f21.0", 4)
	slice, err := admin.ResourceV1().ResourceSlices().Create(ctx, wantSlice, metav1.CreateOptions{})
	itest.Must(t, "create resource slice", err)
	wantPG := itest.PodGroup(ns, "train", 2, "train-fabric")
	pg, err := admin.SchedulingV1beta1().PodGroups(ns).Create(ctx, wantPG, metav1.CreateOptions{})
	itest.Must(t, "create pod group", err)
	wantPod := itest.GangPod(ns, "train-0", pg.Name)
	pod, err := admin.CoreV1().Pods(ns).Create(ctx, wantPod, metav1.CreateOptions{})
	itest.Must(t, "create pod", err)
	claim, err := admin.ResourceV1().ResourceClaims(ns).Create(ctx, itest.GPUClaim(ns, "train-fabric", 1), metav1.CreateOptions{})
	itest.Must(t, "create claim", err)

	// Round trips: a gate that is off drops fields silently.
	// The apiserver defaults disruptionMode and priority; compare what we set.
	ignoreDefaults := cmpopts.IgnoreFields(schedulingv1beta1.PodGroupSpec{}, "DisruptionMode", "Priority")
	if diff := cmp.Diff(wantPG.Spec, pg.Spec, ignoreDefaults); diff != "" {
		t.Errorf("PodGroup spec did not round-trip (-want +got):\n%s", diff)
	}
	if pod.Spec.SchedulingGroup == nil || ptr.Deref(pod.Spec.SchedulingGroup.PodGroupName, "") != pg.Name {
		t.Errorf("pod.spec.schedulingGroup dropped: %+v", pod.Spec.SchedulingGroup)
	}
	if diff := cmp.Diff(wantSlice.Spec, slice.Spec); diff != "" {
		t.Errorf("ResourceSlice spec did not round-trip (-want +got):\n%s", diff)
	}
	if len(dc.Spec.Selectors) != 1 {
		t.Errorf("DeviceClass selectors: got %d, want 1", len(dc.Spec.Selectors))
	}

	rules, err := framework.LoadRules(framework.SchedulerRulesFile)
	itest.Must(t, "load scheduler rules", err)
	scheduler := cp.ClientWithRules(t, "smoke-scheduler", rules)
	noBinding := cp.ClientWithRules(t, "smoke-no-binding", withoutResource(rules, "resourceclaims/binding"))

	allocate := func(c kubernetes.Interface, claim *resourceapi.ResourceClaim) (*resourceapi.ResourceClaim, error) {
		claim = claim.DeepCopy()
		claim.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{
			Results: []resourceapi.DeviceRequestAllocationResult{{
				Request: "gpus", Driver: topology.DriverName, Pool: n.Name, Device: topology.GPUDeviceName(0),
			}},
		}}
		claim.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{itest.ReservedForPodGroup(pg)}
		return c.ResourceV1().ResourceClaims(ns).UpdateStatus(ctx, claim, metav1.UpdateOptions{})
	}

	// The apiserver refuses with 422 Invalid whose cause is a Forbidden
	// field error naming the missing permission.
	if _, err := allocate(noBinding, claim); !isForbiddenField(err, "status.allocation", "resourceclaims/binding") {
		t.Fatalf("allocating without resourceclaims/binding: got err %v, want a Forbidden cause on status.allocation", err)
	}
	got, err := admin.ResourceV1().ResourceClaims(ns).Get(ctx, claim.Name, metav1.GetOptions{})
	itest.Must(t, "get claim", err)
	if got.Status.Allocation != nil || len(got.Status.ReservedFor) != 0 {
		t.Fatalf("forbidden write changed the claim: %+v", got.Status)
	}

	updated, err := allocate(scheduler, claim)
	itest.Must(t, "allocate as scheduler", err)
	got, err = admin.ResourceV1().ResourceClaims(ns).Get(ctx, claim.Name, metav1.GetOptions{})
	itest.Must(t, "get claim", err)
	if diff := cmp.Diff(updated.Status, got.Status, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("claim status did not round-trip (-written +stored):\n%s", diff)
	}
	wantRef := []resourceapi.ResourceClaimConsumerReference{itest.ReservedForPodGroup(pg)}
	if diff := cmp.Diff(wantRef, got.Status.ReservedFor); diff != "" {
		t.Errorf("reservedFor (-want +got):\n%s", diff)
	}
	if got.Status.Allocation == nil || len(got.Status.Allocation.Devices.Results) != 1 {
		t.Errorf("allocation not stored: %+v", got.Status.Allocation)
	}
}

// withoutResource returns rules with resource removed from every rule.
func withoutResource(rules []rbacv1.PolicyRule, resource string) []rbacv1.PolicyRule {
	var out []rbacv1.PolicyRule
	for _, r := range rules {
		r = *r.DeepCopy()
		var kept []string
		for _, res := range r.Resources {
			if res != resource {
				kept = append(kept, res)
			}
		}
		if len(kept) == 0 {
			continue
		}
		r.Resources = kept
		out = append(out, r)
	}
	return out
}

// isForbiddenField reports whether err is an Invalid error with a Forbidden
// cause on path whose message mentions permission.
func isForbiddenField(err error, path, permission string) bool {
	var status apierrors.APIStatus
	if !apierrors.IsInvalid(err) || !errors.As(err, &status) || status.Status().Details == nil {
		return false
	}
	for _, c := range status.Status().Details.Causes {
		if c.Type == metav1.CauseType(field.ErrorTypeForbidden) && c.Field == path && strings.Contains(c.Message, permission) {
			return true
		}
	}
	return false
}
