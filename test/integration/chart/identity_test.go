package chart

import (
	"context"
	"fmt"
	"github.com/gpufabric/gpufabric/pkg/gang/vocab"
	"github.com/gpufabric/gpufabric/test/integration/itest"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	resourceapi "k8s.io/api/resource/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/gpufabric/gpufabric/pkg/gang/extres"
	"github.com/gpufabric/gpufabric/pkg/gang/freeroom"
	"github.com/gpufabric/gpufabric/pkg/topology"
	"github.com/gpufabric/gpufabric/test/integration/framework"
)

// The identities of a shared cluster, each with the chart's rules and
// admission policies, authenticated by real tokens: what each may do, and
// what it must be denied. docs/design/security.md is the threat model.

// check is one request of an identity: want "" means it must be allowed,
// anything else is a part of the denial's message.
type check struct {
	name string
	do   func(ctx context.Context) error
	want string
}

func runChecks(t *testing.T, who string, checks []check) {
	t.Helper()
	for _, c := range checks {
		if err := wantDenied(c.do(t.Context()), c.want); err != nil {
			t.Errorf("%s: %s: %v", who, c.name, err)
		}
	}
}

// Denial messages (prefixes) of the chart's policies.
const (
	pluginDenied    = "ValidatingAdmissionPolicy '" + itest.ChartPluginName + "-resourceslices' with binding '" + itest.ChartPluginName + "-resourceslices' denied request: "
	scopeDenied     = "ValidatingAdmissionPolicy '" + itest.ChartSchedulerName + "-scope' with binding '" + itest.ChartSchedulerName + "-scope' denied request: "
	protectedDenied = "ValidatingAdmissionPolicy '" + itest.ChartSchedulerName + "-protected' with binding '" + itest.ChartSchedulerName + "-protected' denied request: "
	fenceDenied     = "ValidatingAdmissionPolicy '" + itest.ChartSchedulerName + "-fence' with binding '" + itest.ChartSchedulerName + "-fence' denied request: "
)

// rbacDenied is RBAC's message for verb on resource.
func rbacDenied(verb, resource string) string {
	return fmt.Sprintf("cannot %s resource %q", verb, resource)
}

func testPluginIdentity(t *testing.T, cp *framework.ControlPlane, admin kubernetes.Interface) {
	ctx := t.Context()
	plugin := token(t, cp, admin, itest.ChartPluginName, pluginPod(t, admin, "node-a"))
	unbound := token(t, cp, admin, itest.ChartPluginName, nil)

	// The apiserver derives the node from the pod the token is bound to.
	review, err := plugin.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	itest.Must(t, "self subject review", err)
	if u := review.Status.UserInfo; u.Username != pluginUser || len(u.Extra[nodeNameExtra]) != 1 || u.Extra[nodeNameExtra][0] != "node-a" {
		t.Fatalf("plugin token authenticates as %+v, want %s with %s=[node-a]", u, pluginUser, nodeNameExtra)
	}
	// The policy is active once a foreign write is refused (policies load asynchronously).
	itest.Poll(t, "admission policy enforced", 30*time.Second, func(ctx context.Context) error {
		_, err := plugin.ResourceV1().ResourceSlices().Create(ctx, itest.GPUSlice("node-b", "dom", 1), metav1.CreateOptions{})
		if err == nil {
			_ = admin.ResourceV1().ResourceSlices().Delete(ctx, "node-b-"+topology.DriverName, metav1.DeleteOptions{})
			return fmt.Errorf("node-a's plugin created node-b's slice")
		}
		return wantDenied(err, "denied request")
	})
	foreign, err := admin.ResourceV1().ResourceSlices().Create(ctx, itest.GPUSlice("node-b", "dom", 1), metav1.CreateOptions{})
	itest.Must(t, "admin creates node-b's slice", err)
	otherDriver := itest.GPUSlice("node-a", "dom", 1)
	otherDriver.Name, otherDriver.Spec.Driver = "node-a-other", "other.example.com"
	otherPool := itest.GPUSlice("node-a", "dom", 1)
	otherPool.Name, otherPool.Spec.Pool.Name = "node-a-as-b", "node-b"
	selector := itest.FabricDomainSlice("node-a-selector", "node-a")
	selector.Spec.Pool.Name = "node-a"
	own := "node-a-" + topology.DriverName
	// Slices on its node it did not write (an admin's, another driver's).
	adminOtherDriver, adminOtherPool := otherDriver.DeepCopy(), otherPool.DeepCopy()
	adminOtherDriver.Name, adminOtherPool.Name = "admin-node-a-other", "admin-node-a-as-b"
	for _, s := range []*resourceapi.ResourceSlice{adminOtherDriver, adminOtherPool} {
		_, err := admin.ResourceV1().ResourceSlices().Create(ctx, s, metav1.CreateOptions{})
		itest.Must(t, "admin creates "+s.Name, err)
	}

	const on = "the gpufabric kubelet plugin on node node-a "
	runChecks(t, "plugin", []check{
		{"create own node's slice", create(plugin, itest.GPUSlice("node-a", "dom", 2)), ""},
		{"update own node's slice", relabel(plugin, own), ""},
		{"create another node's slice", create(plugin, itest.GPUSlice("node-b", "dom", 2)), pluginDenied + on + "may not write ResourceSlices of node node-b"},
		{"update another node's slice", relabel(plugin, foreign.Name), pluginDenied + on + "may not write ResourceSlices of node node-b"},
		{"delete another node's slice", remove(plugin, foreign.Name), pluginDenied + on + "may not delete ResourceSlices of node node-b"},
		{"create a fabric-domain pool", create(plugin, itest.FabricDomainSlice("fabric-domain.dom", "node-a")), anyOf(pluginDenied+on+"may not write cluster-level ResourceSlices", protectedDenied)},
		{"create a pool with a node selector", create(plugin, selector), anyOf(pluginDenied+on+"may not write cluster-level ResourceSlices", protectedDenied)},
		{"create another driver's slice", create(plugin, otherDriver), pluginDenied + on + "may write only ResourceSlices of driver gpufabric.dev, not slice node-a-other (driver other.example.com"},
		{"create a pool named after another node", create(plugin, otherPool), pluginDenied + on + "may publish only the pool named after its node, not slice node-a-as-b"},
		{"change another driver's slice on its node", relabel(plugin, adminOtherDriver.Name), pluginDenied + on + "may write only ResourceSlices of driver gpufabric.dev, not slice admin-node-a-other"},
		{"change a slice on its node in another node's pool", relabel(plugin, adminOtherPool.Name), pluginDenied + on + "may publish only the pool named after its node, not slice admin-node-a-as-b"},
		{"token not bound to a pod", create(unbound, namedSlice("unbound", "node-a")), pluginDenied + "the gpufabric kubelet plugin has no node"},
		{"delete own node's slice", remove(plugin, own), ""},
		{"allocate a claim", func(ctx context.Context) error {
			_, err := plugin.ResourceV1().ResourceClaims("default").UpdateStatus(ctx, itest.GPUClaim("default", "x", 1), metav1.UpdateOptions{})
			return err
		}, rbacDenied("update", "resourceclaims/status")},
		{"bind a pod", itest.BindAs(plugin, "default", "x", "", "node-a"), rbacDenied("create", "pods/binding")},
		{"create a pod", createPod(plugin, "default", "x"), rbacDenied("create", "pods")},
		{"read secrets", listSecrets(plugin, "default"), rbacDenied("list", "secrets")},
		{"write a commit record", createRecord(plugin, itest.ChartNamespace, "gpufabric-commit-x"), rbacDenied("create", "configmaps")},
		{"take the scheduler's Lease", createLease(plugin, itest.ChartNamespace, itest.ChartSchedulerName, "node-a"), rbacDenied("create", "leases")},
		{"change its Node", func(ctx context.Context) error {
			_, err := plugin.CoreV1().Nodes().Patch(ctx, "node-a", types.MergePatchType, []byte(`{"metadata":{"labels":{"x":"y"}}}`), metav1.PatchOptions{})
			return err
		}, rbacDenied("patch", "nodes")},
	})
}

// testSchedulerIdentity walks the scheduler's commit with its chart
// identity while it holds the Lease, then lists what it must be denied.
func testSchedulerIdentity(t *testing.T, cp *framework.ControlPlane, admin kubernetes.Interface) {
	ctx := t.Context()
	const ns = metav1.NamespaceDefault
	leader := itest.SchedulerPod(t, admin, itest.ChartSchedulerName+"-0")
	sched := token(t, cp, admin, itest.ChartSchedulerName, leader)
	standby := token(t, cp, admin, itest.ChartSchedulerName, itest.SchedulerPod(t, admin, itest.ChartSchedulerName+"-1"))
	podless := token(t, cp, admin, itest.ChartSchedulerName, nil)
	pluginB := token(t, cp, admin, itest.ChartPluginName, pluginPod(t, admin, "node-b"))
	pg, err := admin.SchedulingV1beta1().PodGroups(ns).Create(ctx, itest.PodGroup(ns, "train", 1, "train-fabric"), metav1.CreateOptions{})
	itest.Must(t, "create PodGroup", err)
	pod, err := admin.CoreV1().Pods(ns).Create(ctx, itest.GangPod(ns, "train-0", pg.Name), metav1.CreateOptions{})
	itest.Must(t, "create pod", err)
	other := itest.GangPod(ns, "other-0", pg.Name)
	other.Spec.SchedulerName = corev1.DefaultSchedulerName
	other, err = admin.CoreV1().Pods(ns).Create(ctx, other, metav1.CreateOptions{})
	itest.Must(t, "create kube-scheduler's pod", err)
	_, err = admin.ResourceV1().ResourceClaims(ns).Create(ctx, itest.GPUClaim(ns, "train-fabric", 1), metav1.CreateOptions{})
	itest.Must(t, "create claim", err)
	gpuPod, special, unannotated, misnamed, ownerless := specialClaims(t, admin, ns)
	nodeSlice, err := admin.ResourceV1().ResourceSlices().Create(ctx, namedSlice("sched-test-node-b", "node-b"), metav1.CreateOptions{})
	itest.Must(t, "create node-b's slice", err)
	_, err = admin.CoordinationV1().Leases(itest.ChartNamespace).Create(ctx, lease(itest.ChartNamespace, "kube-controller-manager", "kcm"), metav1.CreateOptions{})
	itest.Must(t, "create another Lease", err)

	// Leader election: the Lease names the leader's pod; the fence policy
	// then lets that replica's writes through (it loads asynchronously).
	itest.Must(t, "take the Lease", createLease(sched, itest.ChartNamespace, itest.ChartSchedulerName, leader.Name)(ctx))
	itest.Poll(t, "fence lets the leader write", 30*time.Second, createRecord(sched, itest.ChartNamespace, vocab.RecordPrefix+"probe"))

	runChecks(t, "scheduler", []check{
		{"watch what it schedules", func(ctx context.Context) error {
			_, err := sched.CoreV1().Pods("").List(ctx, metav1.ListOptions{Limit: 1})
			return err
		}, ""},
		{"renew its Lease", createLeaseRenewal(sched, itest.ChartNamespace, itest.ChartSchedulerName, leader.Name), ""},
		{"write a commit record", createRecord(sched, itest.ChartNamespace, vocab.RecordPrefix+string(pg.UID)), ""},
		{"list its commit records", func(ctx context.Context) error {
			_, err := sched.CoreV1().ConfigMaps(itest.ChartNamespace).List(ctx, metav1.ListOptions{})
			return err
		}, ""},
		{"delete a commit record", deleteConfigMap(sched, itest.ChartNamespace, vocab.RecordPrefix+string(pg.UID)), ""},
		{"write a nomination record", createRecord(sched, itest.ChartNamespace, vocab.NominationPrefix+string(pg.UID)), ""},
		{"delete a nomination record", deleteConfigMap(sched, itest.ChartNamespace, vocab.NominationPrefix+string(pg.UID)), ""},
		{"read PodDisruptionBudgets (preemption honours them)", func(ctx context.Context) error {
			_, err := sched.PolicyV1().PodDisruptionBudgets("").List(ctx, metav1.ListOptions{Limit: 1})
			return err
		}, ""},
		{"add the claim's delete-protection finalizer", func(ctx context.Context) error {
			claim, err := sched.ResourceV1().ResourceClaims(ns).Get(ctx, "train-fabric", metav1.GetOptions{})
			if err != nil {
				return err
			}
			claim.Finalizers = append(claim.Finalizers, resourceapi.Finalizer)
			_, err = sched.ResourceV1().ResourceClaims(ns).Update(ctx, claim, metav1.UpdateOptions{})
			return err
		}, ""},
		{"allocate the claim and reserve it for the PodGroup", allocateFor(sched, ns, "train-fabric", itest.ReservedForPodGroup(pg)), ""},
		{"say why its pod waits", setUnschedulable(sched, ns, pod.Name), ""},
		{"bind its pod", itest.BindAs(sched, ns, pod.Name, pod.UID, "node-a"), ""},
		{"set the PodGroup condition", setPlaced(sched, ns, pg.Name), ""},
		{"publish, update and delete a fabric-domain pool", func(ctx context.Context) error {
			if err := create(sched, itest.FabricDomainSlice("fabric-domain.sched", "node-a", "node-b"))(ctx); err != nil {
				return fmt.Errorf("create: %w", err)
			}
			if err := relabel(sched, "fabric-domain.sched")(ctx); err != nil {
				return fmt.Errorf("update: %w", err)
			}
			return remove(sched, "fabric-domain.sched")(ctx)
		}, ""},
		{"record an event", recordEvent(sched, ns, pg), ""},
		{"publish a fabric-domain pool", create(sched, itest.FabricDomainSlice("fabric-domain.kept", "node-a", "node-b")), ""},
		{"(a plugin changes the scheduler's pool)", relabel(pluginB, "fabric-domain.kept"), anyOf(pluginDenied+"the gpufabric kubelet plugin on node node-b may not write cluster-level ResourceSlices", protectedDenied)},
		{"(a plugin deletes the scheduler's pool)", remove(pluginB, "fabric-domain.kept"), pluginDenied + "the gpufabric kubelet plugin on node node-b may not delete cluster-level ResourceSlices"},
		{"(a cluster admin changes the scheduler's pool)", relabel(admin, "fabric-domain.kept"), protectedDenied + "only the gpufabric scheduler may write fabric-domain pools"},

		{"write a PodGroup's metadata", func(ctx context.Context) error {
			patch := []byte(`{"metadata":{"annotations":{"gpufabric.dev/placement":"node-a"}}}`)
			_, err := sched.SchedulingV1beta1().PodGroups(ns).Patch(ctx, pg.Name, types.MergePatchType, patch, metav1.PatchOptions{})
			return err
		}, rbacDenied("patch", "podgroups")},
		{"write a node's slice", create(sched, namedSlice("sched-node-b", "node-b")), scopeDenied + "the gpufabric scheduler may write only fabric-domain pools of driver gpufabric.dev, not slice sched-node-b"},
		{"change a node's slice", relabel(sched, nodeSlice.Name), scopeDenied + "the gpufabric scheduler may write only fabric-domain pools of driver gpufabric.dev, not slice " + nodeSlice.Name},
		{"delete a node's slice", remove(sched, nodeSlice.Name), scopeDenied + "the gpufabric scheduler may write only fabric-domain pools of driver gpufabric.dev, not slice " + nodeSlice.Name},
		{"write another driver's pool", func(ctx context.Context) error {
			s := itest.FabricDomainSlice("fabric-domain.other", "node-a")
			s.Spec.Driver = "other.example.com"
			return create(sched, s)(ctx)
		}, scopeDenied + "the gpufabric scheduler may write only fabric-domain pools"},
		{"say why kube-scheduler's pod waits", setUnschedulable(sched, ns, other.Name), scopeDenied + "the gpufabric scheduler may update the status only of pods it schedules, not of pod other-0"},
		{"create, allocate and delete a device hold", holdClaim(sched, itest.ChartNamespace, vocab.HoldPrefix, true), ""},
		{"create another claim in its namespace", holdClaim(sched, itest.ChartNamespace, "other-", false), claimsDenied + itest.ChartNamespace + "/other-"},
		{"create a device hold elsewhere", holdClaim(sched, ns, vocab.HoldPrefix, false), claimsDenied + ns + "/" + vocab.HoldPrefix},
		{"create its pod's claim for nvidia.com/gpu", createClaim(sched, special), ""},
		{"write its pod's extendedResourceClaimStatus", setExtendedStatus(sched, gpuPod, special.Name), ""},
		{"delete its pod's claim for nvidia.com/gpu (stale)", deleteClaim(sched, ns, special.Name), ""},
		{"create a claim with a special claim's name, without the annotation", createClaim(sched, unannotated), claimsDenied + ns + "/" + unannotated.Name},
		{"create a special claim not named after its pod", createClaim(sched, misnamed), claimsDenied + ns + "/" + misnamed.Name},
		{"create a special claim owned by no pod", createClaim(sched, ownerless), claimsDenied + ns + "/" + ownerless.Name},
		{"publish its free-room view", applyView(sched, itest.ChartNamespace, freeroom.ConfigMapName), ""},
		{"update its free-room view", applyView(sched, itest.ChartNamespace, freeroom.ConfigMapName), ""},
		{"publish a view under another name", applyView(sched, itest.ChartNamespace, "other-view"), rbacDenied("patch", "configmaps")},
		{"write another ConfigMap of its namespace", createRecord(sched, itest.ChartNamespace, "settings"),
			scopeDenied + "the gpufabric scheduler may write only its records (ConfigMaps gpufabric-commit-* and gpufabric-nomination-*) and its free-room view (gpufabric-free-room)"},
		{"write a ConfigMap elsewhere", createRecord(sched, ns, vocab.RecordPrefix+"x"), rbacDenied("create", "configmaps")},
		{"take another Lease", createLeaseRenewal(sched, itest.ChartNamespace, "kube-controller-manager", leader.Name), rbacDenied("get", "leases")},
		{"create a Lease elsewhere", createLease(sched, metav1.NamespaceSystem, "x", leader.Name), rbacDenied("create", "leases")},
		{"read secrets", listSecrets(sched, itest.ChartNamespace), rbacDenied("list", "secrets")},
		{"create a pod", createPod(sched, ns, "x"), rbacDenied("create", "pods")},
		{"delete a pod", func(ctx context.Context) error {
			return sched.CoreV1().Pods(ns).Delete(ctx, other.Name, metav1.DeleteOptions{})
		}, rbacDenied("delete", "pods")},
		{"create a claim", createClaim(sched, itest.GPUClaim(ns, "mine", 1)), claimsDenied + ns + "/mine"},
		{"delete a claim", deleteClaim(sched, ns, "train-fabric"), claimsDenied + ns + "/train-fabric"},
		{"change a Node", func(ctx context.Context) error {
			_, err := sched.CoreV1().Nodes().Patch(ctx, "node-a", types.MergePatchType, []byte(`{"spec":{"unschedulable":true}}`), metav1.PatchOptions{})
			return err
		}, rbacDenied("patch", "nodes")},
		{"the standby replica binds a pod", itest.BindAs(standby, ns, other.Name, other.UID, "node-a"),
			fenceDenied + "gpufabric-scheduler replica " + itest.ChartSchedulerName + "-1 does not hold Lease " + itest.ChartNamespace + "/" + itest.ChartSchedulerName + " (holder: " + leader.Name + "): its writes are fenced"},
		{"the standby replica writes a claim", allocateFor(standby, ns, "train-fabric", itest.ReservedForPodGroup(pg)), fenceDenied + "gpufabric-scheduler replica " + itest.ChartSchedulerName + "-1 does not hold Lease"},
		{"a token bound to no pod writes a record", createRecord(podless, itest.ChartNamespace, vocab.RecordPrefix+"y"), fenceDenied + "gpufabric-scheduler replica (none: its token is not bound to a pod)"},
	})
	got, err := admin.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
	itest.Must(t, "get pod", err)
	if got.Spec.NodeName != "node-a" {
		t.Errorf("pod bound to %q, want node-a", got.Spec.NodeName)
	}
}

// claimsDenied is the scope policy's denial of a claim the scheduler may
// not create or delete, up to the claim's namespace/name.
const claimsDenied = scopeDenied + "the gpufabric scheduler may create and delete only its device holds (ResourceClaims gpufabric-hold-* in namespace " +
	itest.ChartNamespace + ") and the special claims of pods for extended resources (annotation resource.kubernetes.io/extended-resource-claim, the pod as controller, named <pod>-extended-resources-*), not "

// specialClaims creates a pod of the scheduler's asking nvidia.com/gpu and
// returns it with its special claim (as pkg/gang/extres makes it) and three
// claims the scheduler may not create: its name without the annotation,
// the annotation under another name, and no owner.
func specialClaims(t *testing.T, admin kubernetes.Interface, ns string) (pod *corev1.Pod, special, unannotated, misnamed, ownerless *resourceapi.ResourceClaim) {
	t.Helper()
	pod = itest.GangPod(ns, "gpu-0", "train")
	pod.Spec.SchedulingGroup, pod.Spec.ResourceClaims, pod.Spec.Containers[0].Resources.Claims = nil, nil, nil
	pod.Spec.Containers[0].Resources.Limits = corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")}
	pod, err := admin.CoreV1().Pods(ns).Create(t.Context(), pod, metav1.CreateOptions{})
	itest.Must(t, "create a pod asking nvidia.com/gpu", err)
	r := &extres.Request{Requests: itest.GPUClaim(ns, "", 1).Spec.Devices.Requests}
	special = extres.NewClaim(pod, r)
	unannotated = special.DeepCopy()
	unannotated.Annotations = nil
	misnamed = special.DeepCopy()
	misnamed.Name = "other-extended-resources-bcdfg"
	ownerless = special.DeepCopy()
	ownerless.OwnerReferences = nil
	return pod, special, unannotated, misnamed, ownerless
}

func createClaim(c kubernetes.Interface, claim *resourceapi.ResourceClaim) func(context.Context) error {
	return func(ctx context.Context) error {
		_, err := c.ResourceV1().ResourceClaims(claim.Namespace).Create(ctx, claim, metav1.CreateOptions{})
		return err
	}
}

func deleteClaim(c kubernetes.Interface, ns, name string) func(context.Context) error {
	return func(ctx context.Context) error {
		return c.ResourceV1().ResourceClaims(ns).Delete(ctx, name, metav1.DeleteOptions{})
	}
}

// setExtendedStatus writes a pod's status.extendedResourceClaimStatus as
// the commit does.
func setExtendedStatus(c kubernetes.Interface, p *corev1.Pod, claim string) func(context.Context) error {
	return func(ctx context.Context) error {
		patch := fmt.Sprintf(`{"metadata":{"uid":%q},"status":{"extendedResourceClaimStatus":{"resourceClaimName":%q,"requestMappings":[{"containerName":%q,"resourceName":"nvidia.com/gpu","requestName":"container-0-request-0"}]}}}`,
			p.UID, claim, p.Spec.Containers[0].Name)
		_, err := c.CoreV1().Pods(p.Namespace).Patch(ctx, p.Name, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}, "status")
		return err
	}
}

// testOthers: nobody but the scheduler writes commit or nomination records or
// cluster-level pools of gpufabric.dev (not even a cluster admin), and a
// tenant with full rights on PodGroups, pods and claims of its namespace
// cannot write anything the scheduler acts on without validating it.
func testOthers(t *testing.T, cp *framework.ControlPlane, admin kubernetes.Interface) {
	ctx := t.Context()
	nsAdmin := cp.ClientWithRules(t, "release-namespace-admin", nil)
	itest.Must(t, "grant namespace admin", framework.GrantNamespaceRules(ctx, admin, "release-namespace-admin", itest.ChartNamespace,
		[]rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"*"}},
			{APIGroups: []string{resourceapi.GroupName}, Resources: []string{"resourceclaims"}, Verbs: []string{"*"}},
		}))
	const tenantNS = "tenant"
	itest.Must(t, "create tenant namespace", framework.EnsureNamespace(ctx, admin, tenantNS))
	itest.Must(t, "create tenant service account", framework.EnsureServiceAccount(ctx, admin, tenantNS))
	tenant := cp.ClientWithRules(t, "tenant", nil)
	itest.Must(t, "grant tenant", framework.GrantNamespaceRules(ctx, admin, "tenant", tenantNS, []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"*"}},
		{APIGroups: []string{schedulingv1beta1.GroupName}, Resources: []string{"podgroups"}, Verbs: []string{"*"}},
		{APIGroups: []string{resourceapi.GroupName}, Resources: []string{"resourceclaims", "resourceclaimtemplates"}, Verbs: []string{"*"}},
	}))
	pg, err := tenant.SchedulingV1beta1().PodGroups(tenantNS).Create(ctx, itest.PodGroup(tenantNS, "mine", 1, "mine-fabric"), metav1.CreateOptions{})
	itest.Must(t, "tenant creates a PodGroup", err)
	_, err = tenant.ResourceV1().ResourceClaims(tenantNS).Create(ctx, itest.GPUClaim(tenantNS, "mine-fabric", 1), metav1.CreateOptions{})
	itest.Must(t, "tenant creates a claim", err)
	pod, err := tenant.CoreV1().Pods(tenantNS).Create(ctx, itest.GangPod(tenantNS, "mine-0", pg.Name), metav1.CreateOptions{})
	itest.Must(t, "tenant creates a pod", err)
	itest.Must(t, "publish a free-room view", applyView(admin, itest.ChartNamespace, freeroom.ConfigMapName)(ctx))
	existing := vocab.RecordPrefix + "existing"
	itest.Poll(t, "protected policy enforced", 30*time.Second, func(ctx context.Context) error {
		return wantDenied(createRecord(admin, itest.ChartNamespace, vocab.RecordPrefix+"probe-admin")(ctx), protectedDenied)
	})

	runChecks(t, "cluster admin", []check{
		{"write a commit record", createRecord(admin, itest.ChartNamespace, existing), protectedDenied + "only the gpufabric scheduler may write its records"},
		{"write a nomination record", createRecord(admin, itest.ChartNamespace, vocab.NominationPrefix+"x"), protectedDenied + "only the gpufabric scheduler may write its records"},
		{"publish a fabric-domain pool", create(admin, itest.FabricDomainSlice("fabric-domain.admin", "node-a")), protectedDenied + "only the gpufabric scheduler may write fabric-domain pools"},
		{"publish a cluster-level pool of gpufabric.dev", func(ctx context.Context) error {
			s := itest.FabricDomainSlice("cluster-pool", "node-a")
			s.Spec.Pool.Name = "cluster-pool"
			return create(admin, s)(ctx)
		}, protectedDenied + "only the gpufabric scheduler may write fabric-domain pools and other cluster-level ResourceSlices"},
		{"write another ConfigMap of the namespace", createRecord(admin, itest.ChartNamespace, "settings"), ""},
		{"write a device hold", holdClaim(admin, itest.ChartNamespace, vocab.HoldPrefix, false), protectedDenied + "only the gpufabric scheduler may write its device holds"},
	})
	runChecks(t, "release namespace admin", []check{
		{"write a commit record", createRecord(nsAdmin, itest.ChartNamespace, vocab.RecordPrefix+"ns-admin"), protectedDenied},
		{"write a nomination record", createRecord(nsAdmin, itest.ChartNamespace, vocab.NominationPrefix+"ns-admin"), protectedDenied},
		{"write another ConfigMap", createRecord(nsAdmin, itest.ChartNamespace, "other-settings"), ""},
		{"write a device hold", holdClaim(nsAdmin, itest.ChartNamespace, vocab.HoldPrefix, false), protectedDenied + "only the gpufabric scheduler may write its device holds"},
		{"write another claim", holdClaim(nsAdmin, itest.ChartNamespace, "ns-admin-", false), ""},
	})
	runChecks(t, "tenant", []check{
		{"annotate its PodGroup (the scheduler ignores it)", func(ctx context.Context) error {
			patch := []byte(`{"metadata":{"annotations":{"gpufabric.dev/placement":"{}"}}}`)
			_, err := tenant.SchedulingV1beta1().PodGroups(tenantNS).Patch(ctx, pg.Name, types.MergePatchType, patch, metav1.PatchOptions{})
			return err
		}, ""},
		{"write a commit record", createRecord(tenant, itest.ChartNamespace, vocab.RecordPrefix+string(pg.UID)), rbacDenied("create", "configmaps")},
		{"give its PodGroup a priority it was not admitted with", func(ctx context.Context) error {
			patch := []byte(`{"spec":{"priority":1000000000}}`)
			_, err := tenant.SchedulingV1beta1().PodGroups(tenantNS).Patch(ctx, pg.Name, types.MergePatchType, patch, metav1.PatchOptions{})
			return err
		}, "field is immutable"},
		{"allocate its claim", allocateFor(tenant, tenantNS, "mine-fabric", itest.ReservedForPodGroup(pg)), rbacDenied("update", "resourceclaims/status")},
		{"bind its pod", itest.BindAs(tenant, tenantNS, pod.Name, pod.UID, "node-a"), rbacDenied("create", "pods/binding")},
		{"set its PodGroup's condition", setPlaced(tenant, tenantNS, pg.Name), rbacDenied("update", "podgroups/status")},
		{"publish a slice", create(tenant, namedSlice("tenant-slice", "node-a")), rbacDenied("create", "resourceslices")},
		{"read the scheduler's Lease", func(ctx context.Context) error {
			_, err := tenant.CoordinationV1().Leases(itest.ChartNamespace).Get(ctx, itest.ChartSchedulerName, metav1.GetOptions{})
			return err
		}, rbacDenied("get", "leases")},
		{"read the free-room view (as every authenticated user)", getConfigMap(tenant, itest.ChartNamespace, freeroom.ConfigMapName), ""},
		{"read another ConfigMap of the release namespace", getConfigMap(tenant, itest.ChartNamespace, "kube-root-ca.crt"), rbacDenied("get", "configmaps")},
		{"list the release namespace's ConfigMaps", func(ctx context.Context) error {
			_, err := tenant.CoreV1().ConfigMaps(itest.ChartNamespace).List(ctx, metav1.ListOptions{})
			return err
		}, rbacDenied("list", "configmaps")},
		{"write the free-room view", applyView(tenant, itest.ChartNamespace, freeroom.ConfigMapName), rbacDenied("patch", "configmaps")},
		{"list nodes", func(ctx context.Context) error {
			_, err := tenant.CoreV1().Nodes().List(ctx, metav1.ListOptions{Limit: 1})
			return err
		}, rbacDenied("list", "nodes")},
	})
}

// applyView publishes a free-room view named name as the scheduler does
// (server-side apply).
func applyView(c kubernetes.Interface, ns, name string) func(context.Context) error {
	return func(ctx context.Context) error {
		cm := corev1ac.ConfigMap(name, ns).WithData(map[string]string{freeroom.DataKey: `{"version":1,"levels":[]}`})
		_, err := c.CoreV1().ConfigMaps(ns).Apply(ctx, cm, metav1.ApplyOptions{FieldManager: "gpufabric-scheduler", Force: true})
		return err
	}
}

func getConfigMap(c kubernetes.Interface, ns, name string) func(context.Context) error {
	return func(ctx context.Context) error {
		_, err := c.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{})
		return err
	}
}

func createRecord(c kubernetes.Interface, ns, name string) func(context.Context) error {
	return func(ctx context.Context) error {
		cm := &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{vocab.LabelCommitRecord: "true"}},
			Data:       map[string]string{"record": "{}"},
		}
		_, err := c.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{})
		return err
	}
}

// holdClaim creates a claim named from prefix (generateName) as a device
// hold would be; with whole, it also allocates and deletes it.
func holdClaim(c kubernetes.Interface, ns, prefix string, whole bool) func(context.Context) error {
	return func(ctx context.Context) error {
		hold := itest.GPUClaim(ns, "", 1)
		hold.GenerateName = prefix
		hold.Labels = map[string]string{vocab.HoldLabel: "uid-of-the-held-claim"}
		hold, err := c.ResourceV1().ResourceClaims(ns).Create(ctx, hold, metav1.CreateOptions{})
		if err != nil || !whole {
			return err
		}
		hold.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{{
			Request: "gpus", Driver: topology.DriverName, Pool: "node-a", Device: topology.GPUDeviceName(0)}}}}
		if _, err := c.ResourceV1().ResourceClaims(ns).UpdateStatus(ctx, hold, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("allocate: %w", err)
		}
		return c.ResourceV1().ResourceClaims(ns).Delete(ctx, hold.Name, metav1.DeleteOptions{})
	}
}

func deleteConfigMap(c kubernetes.Interface, ns, name string) func(context.Context) error {
	return func(ctx context.Context) error {
		return c.CoreV1().ConfigMaps(ns).Delete(ctx, name, metav1.DeleteOptions{})
	}
}

func lease(ns, name, holder string) *coordinationv1.Lease {
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To(holder), LeaseDurationSeconds: ptr.To[int32](15), RenewTime: ptr.To(metav1.NowMicro())},
	}
}

func createLease(c kubernetes.Interface, ns, name, holder string) func(context.Context) error {
	return func(ctx context.Context) error {
		_, err := c.CoordinationV1().Leases(ns).Create(ctx, lease(ns, name, holder), metav1.CreateOptions{})
		return err
	}
}

// createLeaseRenewal renews a Lease as c (read and update).
func createLeaseRenewal(c kubernetes.Interface, ns, name, holder string) func(context.Context) error {
	return func(ctx context.Context) error {
		l, err := c.CoordinationV1().Leases(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		l.Spec.HolderIdentity, l.Spec.RenewTime = ptr.To(holder), ptr.To(metav1.NowMicro())
		_, err = c.CoordinationV1().Leases(ns).Update(ctx, l, metav1.UpdateOptions{})
		return err
	}
}

func allocateFor(c kubernetes.Interface, ns, name string, consumer resourceapi.ResourceClaimConsumerReference) func(context.Context) error {
	return func(ctx context.Context) error {
		claim, err := c.ResourceV1().ResourceClaims(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		claim.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{
			Results: []resourceapi.DeviceRequestAllocationResult{{Request: "gpus", Driver: topology.DriverName, Pool: "node-a", Device: topology.GPUDeviceName(0)}},
		}}
		claim.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{consumer}
		_, err = c.ResourceV1().ResourceClaims(ns).UpdateStatus(ctx, claim, metav1.UpdateOptions{})
		return err
	}
}

func setUnschedulable(c kubernetes.Interface, ns, name string) func(context.Context) error {
	return func(ctx context.Context) error {
		patch := []byte(`{"status":{"conditions":[{"type":"PodScheduled","status":"False","reason":"Unschedulable","message":"waiting"}]}}`)
		_, err := c.CoreV1().Pods(ns).Patch(ctx, name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
		return err
	}
}

func setPlaced(c kubernetes.Interface, ns, name string) func(context.Context) error {
	return func(ctx context.Context) error {
		cur, err := c.SchedulingV1beta1().PodGroups(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		meta.SetStatusCondition(&cur.Status.Conditions, metav1.Condition{
			Type: schedulingv1beta1.PodGroupInitiallyScheduled, Status: metav1.ConditionTrue, Reason: "Placed", Message: "1 pod in node-a",
		})
		_, err = c.SchedulingV1beta1().PodGroups(ns).UpdateStatus(ctx, cur, metav1.UpdateOptions{})
		return err
	}
}

func recordEvent(c kubernetes.Interface, ns string, pg *schedulingv1beta1.PodGroup) func(context.Context) error {
	return func(ctx context.Context) error {
		_, err := c.EventsV1().Events(ns).Create(ctx, &eventsv1.Event{
			ObjectMeta:          metav1.ObjectMeta{Name: "train.placed", Namespace: ns},
			EventTime:           metav1.NowMicro(),
			ReportingController: topology.SchedulerName, ReportingInstance: "test",
			Action: "Place", Reason: "Placed", Type: corev1.EventTypeNormal, Note: "1 pod in node-a",
			Regarding: corev1.ObjectReference{APIVersion: "scheduling.k8s.io/v1beta1", Kind: "PodGroup", Namespace: ns, Name: pg.Name, UID: pg.UID},
		}, metav1.CreateOptions{})
		return err
	}
}

func createPod(c kubernetes.Interface, ns, name string) func(context.Context) error {
	return func(ctx context.Context) error {
		_, err := c.CoreV1().Pods(ns).Create(ctx, itest.GangPod(ns, name, "x"), metav1.CreateOptions{})
		return err
	}
}

func listSecrets(c kubernetes.Interface, ns string) func(context.Context) error {
	return func(ctx context.Context) error {
		_, err := c.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{})
		return err
	}
}
