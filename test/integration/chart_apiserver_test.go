package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	resourceapi "k8s.io/api/resource/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/gpufabric/gpufabric/pkg/topology"
	"github.com/gpufabric/gpufabric/test/integration/framework"
)

// nodeNameExtra is the user extra a pod-bound service-account token carries.
const nodeNameExtra = "authentication.kubernetes.io/node-name"

// TestChartOnAPIServer applies the rendered chart (default values) to a real
// kube-apiserver and proves, with the chart's own service accounts
// authenticated by real tokens, that RBAC and the admission policy let
// each identity do its job and nothing of the other's.
func TestChartOnAPIServer(t *testing.T) {
	helm, root := helmTool(t)
	r, err := renderChart(t.Context(), helm, root, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	cp := framework.StartT(t, framework.Options{})
	ctx := t.Context()
	admin := cp.AdminClient(t)
	_, err = admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: chartNamespace}}, metav1.CreateOptions{})
	must(t, "create namespace", err)
	must(t, "apply chart", applyAll(ctx, cp.AdminConfig(), chartNamespace, r.objects))
	for _, n := range []string{"node-a", "node-b"} {
		_, err := admin.CoreV1().Nodes().Create(ctx, node(n, nil), metav1.CreateOptions{})
		must(t, "create node", err)
	}

	t.Run("kubelet plugin writes only its node's slices", func(t *testing.T) {
		testPluginIdentity(t, cp, admin)
	})
	t.Run("scheduler commits a gang", func(t *testing.T) {
		testSchedulerIdentity(t, cp, admin)
	})
	t.Run("mock profile is accepted", func(t *testing.T) {
		// Another release in another namespace: no name clashes except the
		// DeviceClasses, which are the same.
		out, err := runHelm(ctx, helm, root, templateArgs("gpufabric-mock", "gpufabric-mock", []string{mockValuesFile}, nil)...)
		must(t, "render mock profile", err)
		mock, err := decodeManifests(out)
		must(t, "decode mock profile", err)
		_, err = admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "gpufabric-mock"}}, metav1.CreateOptions{})
		must(t, "create namespace", err)
		must(t, "apply mock profile", applyAll(ctx, cp.AdminConfig(), "gpufabric-mock", mock.objects))
	})
	t.Run("kind example is accepted", func(t *testing.T) {
		examples, err := readExamples(root)
		must(t, "read examples", err)
		must(t, "apply examples", applyAll(ctx, cp.AdminConfig(), "", examples.objects))
		// The gates are on: nothing of the gang was dropped.
		pg, err := admin.SchedulingV1beta1().PodGroups("fabric-demo").Get(ctx, "train", metav1.GetOptions{})
		must(t, "get PodGroup", err)
		if pg.Spec.SchedulingConstraints == nil || len(pg.Spec.ResourceClaims) != 1 {
			t.Errorf("PodGroup lost fields: %+v", pg.Spec)
		}
		job, err := admin.BatchV1().Jobs("fabric-demo").Get(ctx, "train", metav1.GetOptions{})
		must(t, "get Job", err)
		if sg := job.Spec.Template.Spec.SchedulingGroup; sg == nil || ptr.Deref(sg.PodGroupName, "") != "train" {
			t.Errorf("Job pod template lost schedulingGroup: %+v", sg)
		}
	})
}

// token returns a client authenticated as a service account of the chart
// by a token from the TokenRequest API, bound to pod when it is set.
func token(t *testing.T, cp *framework.ControlPlane, admin kubernetes.Interface, sa string, pod *corev1.Pod) kubernetes.Interface {
	t.Helper()
	req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}
	if pod != nil {
		req.Spec.BoundObjectRef = &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID}
	}
	tr, err := admin.CoreV1().ServiceAccounts(chartNamespace).CreateToken(t.Context(), sa, req, metav1.CreateOptions{})
	must(t, "request token for "+sa, err)
	cfg := &rest.Config{
		Host:            cp.Host(),
		TLSClientConfig: rest.TLSClientConfig{CAData: cp.AdminConfig().CAData},
		BearerToken:     tr.Status.Token,
	}
	c, err := kubernetes.NewForConfig(cfg)
	must(t, "client for "+sa, err)
	return c
}

// pluginPod is a pod of the chart's DaemonSet bound to nodeName.
func pluginPod(t *testing.T, admin kubernetes.Interface, nodeName string) *corev1.Pod {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: pluginName + "-" + nodeName, Namespace: chartNamespace},
		Spec: corev1.PodSpec{
			ServiceAccountName: pluginName,
			NodeName:           nodeName,
			Containers:         []corev1.Container{{Name: "plugin", Image: "registry.example/kubelet-plugin:1"}},
		},
	}
	pod, err := admin.CoreV1().Pods(chartNamespace).Create(t.Context(), pod, metav1.CreateOptions{})
	must(t, "create plugin pod", err)
	return pod
}

func testPluginIdentity(t *testing.T, cp *framework.ControlPlane, admin kubernetes.Interface) {
	ctx := t.Context()
	plugin := token(t, cp, admin, pluginName, pluginPod(t, admin, "node-a"))
	unbound := token(t, cp, admin, pluginName, nil)

	// The apiserver derives the node from the pod the token is bound to.
	review, err := plugin.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	must(t, "self subject review", err)
	if u := review.Status.UserInfo; u.Username != pluginUser || len(u.Extra[nodeNameExtra]) != 1 || u.Extra[nodeNameExtra][0] != "node-a" {
		t.Fatalf("plugin token authenticates as %+v, want %s with %s=[node-a]", u, pluginUser, nodeNameExtra)
	}

	// The policy is active once a foreign write is refused (policies load asynchronously).
	poll(t, "admission policy enforced", 30*time.Second, func(ctx context.Context) error {
		_, err := plugin.ResourceV1().ResourceSlices().Create(ctx, gpuSlice("node-b", "dom", 1), metav1.CreateOptions{})
		if err == nil {
			_ = admin.ResourceV1().ResourceSlices().Delete(ctx, "node-b-"+topology.DriverName, metav1.DeleteOptions{})
			return fmt.Errorf("node-a's plugin created node-b's slice")
		}
		return wantDenied(err, "denied request")
	})
	foreign, err := admin.ResourceV1().ResourceSlices().Create(ctx, gpuSlice("node-b", "dom", 1), metav1.CreateOptions{})
	must(t, "admin creates node-b's slice", err)
	cluster := fabricDomainSlice("fabric-domain.dom", "node-a")

	const denied = "ValidatingAdmissionPolicy '" + pluginName + "-resourceslices' with binding '" + pluginName + "-resourceslices' denied request: "
	steps := []struct {
		name string
		do   func(ctx context.Context) error
		want string // "" = allowed
	}{
		{"create own node's slice", create(plugin, gpuSlice("node-a", "dom", 2)), ""},
		{"update own node's slice", relabel(plugin, "node-a-"+topology.DriverName), ""},
		{"create another node's slice", create(plugin, gpuSlice("node-b", "dom", 2)), denied + "the gpufabric kubelet plugin on node node-a may not write ResourceSlices of node node-b"},
		{"update another node's slice", relabel(plugin, foreign.Name), denied + "the gpufabric kubelet plugin on node node-a may not write ResourceSlices of node node-b"},
		{"delete another node's slice", remove(plugin, foreign.Name), denied + "the gpufabric kubelet plugin on node node-a may not delete ResourceSlices of node node-b"},
		{"create a cluster-level slice", create(plugin, cluster), denied + "the gpufabric kubelet plugin on node node-a may not write cluster-level ResourceSlices"},
		{"token not bound to a pod", create(unbound, namedSlice("unbound", "node-a")), denied + "the gpufabric kubelet plugin has no node"},
		{"delete own node's slice", remove(plugin, "node-a-"+topology.DriverName), ""},
		{"RBAC: no claim allocation", func(ctx context.Context) error {
			_, err := plugin.ResourceV1().ResourceClaims("default").UpdateStatus(ctx, gpuClaim("default", "x", 1), metav1.UpdateOptions{})
			return err
		}, `cannot update resource "resourceclaims/status"`},
		{"RBAC: no pod binding", func(ctx context.Context) error {
			return plugin.CoreV1().Pods("default").Bind(ctx, &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: "x"}, Target: corev1.ObjectReference{Kind: "Node", Name: "node-a"}}, metav1.CreateOptions{})
		}, `cannot create resource "pods/binding"`},
	}
	for _, s := range steps {
		if err := wantDenied(s.do(ctx), s.want); err != nil {
			t.Errorf("%s: %v", s.name, err)
		}
	}
}

func create(c kubernetes.Interface, s *resourceapi.ResourceSlice) func(context.Context) error {
	return func(ctx context.Context) error {
		_, err := c.ResourceV1().ResourceSlices().Create(ctx, s, metav1.CreateOptions{})
		return err
	}
}

// namedSlice is a one-GPU slice of nodeName called name.
func namedSlice(name, nodeName string) *resourceapi.ResourceSlice {
	s := gpuSlice(nodeName, "dom", 1)
	s.Name = name
	return s
}

// relabel updates a slice (a label) as c; it reads it as c too.
func relabel(c kubernetes.Interface, name string) func(context.Context) error {
	return func(ctx context.Context) error {
		s, err := c.ResourceV1().ResourceSlices().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("get: %w", err)
		}
		s.Labels = map[string]string{"touched": "true"}
		_, err = c.ResourceV1().ResourceSlices().Update(ctx, s, metav1.UpdateOptions{})
		return err
	}
}

func remove(c kubernetes.Interface, name string) func(context.Context) error {
	return func(ctx context.Context) error {
		return c.ResourceV1().ResourceSlices().Delete(ctx, name, metav1.DeleteOptions{})
	}
}

// fabricDomainSlice is a cluster-level pool (node selector) of one channel.
func fabricDomainSlice(pool string, nodes ...string) *resourceapi.ResourceSlice {
	return &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: pool},
		Spec: resourceapi.ResourceSliceSpec{
			Driver: topology.DriverName,
			Pool:   resourceapi.ResourcePool{Name: pool, ResourceSliceCount: 1},
			NodeSelector: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
				MatchExpressions: []corev1.NodeSelectorRequirement{{Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn, Values: nodes}},
			}}},
			Devices: []resourceapi.Device{{
				Name: "channel-0",
				Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
					topology.AttrType: {StringValue: ptr.To(topology.DeviceTypeFabricDomain)},
				},
			}},
		},
	}
}

// testSchedulerIdentity walks the scheduler's commit with its chart
// identity: claim finalizer, allocation + reservedFor, binding, PodGroup
// annotation and condition, cluster-level slices, events, its Lease.
func testSchedulerIdentity(t *testing.T, cp *framework.ControlPlane, admin kubernetes.Interface) {
	ctx := t.Context()
	const ns = metav1.NamespaceDefault
	sched := token(t, cp, admin, schedName, nil)
	pg, err := admin.SchedulingV1beta1().PodGroups(ns).Create(ctx, podGroup(ns, "train", 1, "train-fabric"), metav1.CreateOptions{})
	must(t, "create PodGroup", err)
	pod, err := admin.CoreV1().Pods(ns).Create(ctx, gangPod(ns, "train-0", pg.Name), metav1.CreateOptions{})
	must(t, "create pod", err)
	_, err = admin.ResourceV1().ResourceClaims(ns).Create(ctx, gpuClaim(ns, "train-fabric", 1), metav1.CreateOptions{})
	must(t, "create claim", err)
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: topology.SchedulerName, Namespace: chartNamespace}}

	steps := []struct {
		name string
		do   func(ctx context.Context) error
	}{
		{"watch what it schedules", func(ctx context.Context) error {
			_, err := sched.CoreV1().Pods("").List(ctx, metav1.ListOptions{Limit: 1})
			return err
		}},
		{"record the commit intent on the PodGroup", func(ctx context.Context) error {
			patch := []byte(`{"metadata":{"annotations":{"gpufabric.dev/placement":"node-a"}}}`)
			_, err := sched.SchedulingV1beta1().PodGroups(ns).Patch(ctx, pg.Name, types.MergePatchType, patch, metav1.PatchOptions{})
			return err
		}},
		{"add the claim's delete-protection finalizer", func(ctx context.Context) error {
			claim, err := sched.ResourceV1().ResourceClaims(ns).Get(ctx, "train-fabric", metav1.GetOptions{})
			if err != nil {
				return err
			}
			claim.Finalizers = append(claim.Finalizers, "resource.kubernetes.io/delete-protection")
			_, err = sched.ResourceV1().ResourceClaims(ns).Update(ctx, claim, metav1.UpdateOptions{})
			return err
		}},
		{"allocate the claim and reserve it for the PodGroup", func(ctx context.Context) error {
			claim, err := sched.ResourceV1().ResourceClaims(ns).Get(ctx, "train-fabric", metav1.GetOptions{})
			if err != nil {
				return err
			}
			claim.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{
				Results: []resourceapi.DeviceRequestAllocationResult{{Request: "gpus", Driver: topology.DriverName, Pool: "node-a", Device: topology.GPUDeviceName(0)}},
			}}
			claim.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{reservedForPodGroup(pg)}
			_, err = sched.ResourceV1().ResourceClaims(ns).UpdateStatus(ctx, claim, metav1.UpdateOptions{})
			return err
		}},
		{"bind the pod", func(ctx context.Context) error {
			return sched.CoreV1().Pods(ns).Bind(ctx, &corev1.Binding{
				ObjectMeta: metav1.ObjectMeta{Name: pod.Name, UID: pod.UID},
				Target:     corev1.ObjectReference{Kind: "Node", Name: "node-a"},
			}, metav1.CreateOptions{})
		}},
		{"set the PodGroup condition", func(ctx context.Context) error {
			cur, err := sched.SchedulingV1beta1().PodGroups(ns).Get(ctx, pg.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			meta.SetStatusCondition(&cur.Status.Conditions, metav1.Condition{
				Type: schedulingv1beta1.PodGroupInitiallyScheduled, Status: metav1.ConditionTrue, Reason: "Placed", Message: "1 pod in node-a",
			})
			_, err = sched.SchedulingV1beta1().PodGroups(ns).UpdateStatus(ctx, cur, metav1.UpdateOptions{})
			return err
		}},
		{"publish, update and delete a fabric-domain pool", func(ctx context.Context) error {
			if err := create(sched, fabricDomainSlice("fabric-domain.sched", "node-a", "node-b"))(ctx); err != nil {
				return fmt.Errorf("create: %w", err)
			}
			if err := relabel(sched, "fabric-domain.sched")(ctx); err != nil {
				return fmt.Errorf("update: %w", err)
			}
			return remove(sched, "fabric-domain.sched")(ctx)
		}},
		{"record an event", func(ctx context.Context) error {
			_, err := sched.EventsV1().Events(ns).Create(ctx, &eventsv1.Event{
				ObjectMeta:          metav1.ObjectMeta{Name: "train.placed", Namespace: ns},
				EventTime:           metav1.NowMicro(),
				ReportingController: topology.SchedulerName, ReportingInstance: "test",
				Action: "Place", Reason: "Placed", Type: corev1.EventTypeNormal, Note: "1 pod in node-a",
				Regarding: corev1.ObjectReference{APIVersion: "scheduling.k8s.io/v1beta1", Kind: "PodGroup", Namespace: ns, Name: pg.Name, UID: pg.UID},
			}, metav1.CreateOptions{})
			return err
		}},
		{"take and renew the leader Lease", func(ctx context.Context) error {
			leases := sched.CoordinationV1().Leases(chartNamespace)
			if _, err := leases.Create(ctx, lease, metav1.CreateOptions{}); err != nil {
				return fmt.Errorf("create: %w", err)
			}
			l, err := leases.Get(ctx, lease.Name, metav1.GetOptions{})
			if err != nil {
				return fmt.Errorf("get: %w", err)
			}
			l.Spec.HolderIdentity = ptr.To("gpufabric-scheduler-0")
			_, err = leases.Update(ctx, l, metav1.UpdateOptions{})
			return err
		}},
	}
	for _, s := range steps {
		if err := s.do(ctx); err != nil {
			t.Errorf("%s: %v", s.name, err)
		}
	}

	got, err := admin.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
	must(t, "get pod", err)
	if got.Spec.NodeName != "node-a" {
		t.Errorf("pod bound to %q, want node-a", got.Spec.NodeName)
	}
	// The plugin's policy does not match the scheduler (it may clean up any
	// slice); RBAC still keeps it from what it does not need.
	if err := wantDenied(create(sched, namedSlice("sched-node-b", "node-b"))(ctx), ""); err != nil {
		t.Errorf("scheduler writing a node slice: %v", err)
	}
	_, err = sched.CoreV1().Secrets(chartNamespace).List(ctx, metav1.ListOptions{})
	if err := wantDenied(err, `cannot list resource "secrets"`); err != nil {
		t.Errorf("scheduler listing secrets: %v", err)
	}
}
