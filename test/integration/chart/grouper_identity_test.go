package chart

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/gpufabric/gpufabric/pkg/gang/vocab"
	"github.com/gpufabric/gpufabric/pkg/topology"
	"github.com/gpufabric/gpufabric/test/integration/framework"
	"github.com/gpufabric/gpufabric/test/integration/itest"
)

// Denial messages (prefixes) of the grouper's policies.
const (
	grouperScopeDenied     = "ValidatingAdmissionPolicy '" + itest.ChartGrouperName + "-scope' with binding '" + itest.ChartGrouperName + "-scope' denied request: "
	grouperProtectedDenied = "ValidatingAdmissionPolicy '" + itest.ChartGrouperName + "-protected' with binding '" + itest.ChartGrouperName + "-protected' denied request: "
)

// testGrouperIdentity: with a real token of the chart's grouper service
// account, the grouper creates, updates and deletes the groups it makes
// (labelled, owned by a workload) in any namespace, and reads workloads;
// it may not write other groups, unowned ones, pods, bindings or claims.
// A tenant may not create groups that look like the grouper's nor change
// the grouper's (spec, labels, annotations: the gang's minCount, the
// membership mark), but may delete them. The chart's pod policy names a
// new pod's group.
func testGrouperIdentity(t *testing.T, cp *framework.ControlPlane, admin kubernetes.Interface) {
	ctx := t.Context()
	grouper := token(t, cp, admin, itest.ChartGrouperName, nil)
	const ns = "grouped"
	itest.Must(t, "create namespace", framework.EnsureNamespace(ctx, admin, ns))
	itest.Must(t, "service account", framework.EnsureServiceAccount(ctx, admin, ns))
	owner, err := admin.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "workload"}}, metav1.CreateOptions{})
	itest.Must(t, "create an owner", err)
	ownerRef := metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: owner.Name, UID: owner.UID, Controller: ptr.To(true)}
	tenant := cp.ClientWithRules(t, "group-tenant", nil)
	itest.Must(t, "grant tenant", framework.GrantNamespaceRules(ctx, admin, "group-tenant", ns, []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"*"}},
		{APIGroups: []string{schedulingv1beta1.GroupName}, Resources: []string{"podgroups", "workloads"}, Verbs: []string{"*"}},
	}))
	itest.Poll(t, "grouper policies enforced", 30*time.Second, func(ctx context.Context) error {
		return wantDenied(createGroup(grouper, ns, "probe", false, &ownerRef)(ctx), grouperScopeDenied)
	})
	itest.Must(t, "grouper creates its group", createGroup(grouper, ns, "jobset.train.workers", true, &ownerRef)(ctx))
	itest.Must(t, "grouper creates a group in another namespace", createGroup(grouper, "default", "lws.serve.0", true, &ownerRef)(ctx))
	_, err = tenant.SchedulingV1beta1().PodGroups(ns).Create(ctx, itest.PodGroup(ns, "tenant-own", 1, "shared"), metav1.CreateOptions{})
	itest.Must(t, "tenant creates its own PodGroup", err)

	const scope = grouperScopeDenied + "gpufabric-grouper may write only the groups it makes (label app.kubernetes.io/managed-by=gpufabric-grouper)"
	runChecks(t, "grouper", []check{
		{"raise its group's minCount", setMinCount(grouper, ns, "jobset.train.workers", 3), ""},
		{"create an unmarked group", createGroup(grouper, ns, "plain", false, &ownerRef), scope},
		{"create a group no workload owns", createGroup(grouper, ns, "orphan", true, nil), grouperScopeDenied + "gpufabric-grouper groups are owned by their workload"},
		{"change the tenant's PodGroup", setMinCount(grouper, ns, "tenant-own", 2), scope},
		{"delete the tenant's PodGroup", func(ctx context.Context) error {
			return grouper.SchedulingV1beta1().PodGroups(ns).Delete(ctx, "tenant-own", metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}})
		}, scope},
		{"list Jobs (Indexed Jobs it groups)", func(ctx context.Context) error {
			_, err := grouper.BatchV1().Jobs("").List(ctx, metav1.ListOptions{Limit: 1})
			return err
		}, ""},
		{"create a pod", createPod(grouper, ns, "x"), rbacDenied("create", "pods")},
		{"bind a pod", itest.BindAs(grouper, ns, "x", "", "node-a"), rbacDenied("create", "pods/binding")},
		{"allocate a claim", allocateFor(grouper, ns, "c", itest.ReservedForPodGroup(itest.PodGroup(ns, "g", 1, "shared"))), rbacDenied("get", "resourceclaims")},
		{"set a PodGroup's condition", setPlaced(grouper, ns, "jobset.train.workers"), rbacDenied("update", "podgroups/status")},
		{"list secrets", listSecrets(grouper, ns), rbacDenied("list", "secrets")},
	})
	const protected = grouperProtectedDenied + "only gpufabric-grouper creates and changes the groups it makes"
	runChecks(t, "tenant", []check{
		{"create a group marked as the grouper's", createGroup(tenant, ns, "forged", true, &ownerRef), protected},
		{"lower the grouper's minCount", setMinCount(tenant, ns, "jobset.train.workers", 1), protected},
		{"remove the membership mark", func(ctx context.Context) error {
			patch := []byte(`{"metadata":{"annotations":{"` + vocab.AnnotationMemberOwnerUID + `":null}}}`)
			_, err := tenant.SchedulingV1beta1().PodGroups(ns).Patch(ctx, "jobset.train.workers", types.MergePatchType, patch, metav1.PatchOptions{})
			return err
		}, protected},
		{"unmark the grouper's group", func(ctx context.Context) error {
			patch := []byte(`{"metadata":{"labels":{"` + vocab.LabelManagedBy + `":"me"}}}`)
			_, err := tenant.SchedulingV1beta1().PodGroups(ns).Patch(ctx, "jobset.train.workers", types.MergePatchType, patch, metav1.PatchOptions{})
			return err
		}, protected},
		{"change its own PodGroup", setMinCount(tenant, ns, "tenant-own", 1), ""},
		{"delete the grouper's group", func(ctx context.Context) error {
			return tenant.SchedulingV1beta1().PodGroups(ns).Delete(ctx, "jobset.train.workers", metav1.DeleteOptions{})
		}, ""},
	})

	// The chart's pod policy names a new pod's group.
	itest.Poll(t, "pod policy acts", 30*time.Second, func(ctx context.Context) error {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "w", Namespace: ns, Labels: map[string]string{"leaderworkerset.sigs.k8s.io/name": "serve", "leaderworkerset.sigs.k8s.io/group-index": "2"}},
			Spec:       corev1.PodSpec{SchedulerName: topology.SchedulerName, Containers: []corev1.Container{{Name: "c", Image: "registry.example/c:1"}}},
		}
		got, err := tenant.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			return err
		}
		if sg := got.Spec.SchedulingGroup; sg == nil || ptr.Deref(sg.PodGroupName, "") != "lws.serve.2" {
			return fmt.Errorf("pod group %+v, want lws.serve.2", sg)
		}
		return nil
	})
}

// createGroup creates a PodGroup, marked as the grouper's when marked,
// owned by owner when set.
func createGroup(c kubernetes.Interface, ns, name string, marked bool, owner *metav1.OwnerReference) func(context.Context) error {
	return func(ctx context.Context) error {
		pg := itest.PodGroup(ns, name, 2, "shared")
		if marked {
			pg.Labels = map[string]string{vocab.LabelManagedBy: vocab.ManagedByGrouper}
			pg.Annotations = map[string]string{vocab.AnnotationMemberOwnerUID: "uid"}
		}
		if owner != nil {
			pg.OwnerReferences = []metav1.OwnerReference{*owner}
		}
		_, err := c.SchedulingV1beta1().PodGroups(ns).Create(ctx, pg, metav1.CreateOptions{})
		return err
	}
}

func setMinCount(c kubernetes.Interface, ns, name string, n int) func(context.Context) error {
	return func(ctx context.Context) error {
		patch := []byte(fmt.Sprintf(`{"spec":{"schedulingPolicy":{"gang":{"minCount":%d}}}}`, n))
		_, err := c.SchedulingV1beta1().PodGroups(ns).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{})
		return err
	}
}
