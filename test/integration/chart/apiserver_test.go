package chart

import (
	"context"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/gpufabric/gpufabric/test/integration/framework"
	"github.com/gpufabric/gpufabric/test/integration/itest"
)

// nodeNameExtra is the user extra a pod-bound service-account token carries.
const nodeNameExtra = "authentication.kubernetes.io/node-name"

// TestChartOnAPIServer applies the rendered chart (default values) to a real
// kube-apiserver and proves, with the chart's own service accounts
// authenticated by real tokens, that RBAC and the admission policy let
// each identity do its job and nothing of the other's.
func TestChartOnAPIServer(t *testing.T) {
	helm, root := itest.HelmTool(t)
	r, err := itest.RenderChart(t.Context(), helm, root, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	cp := framework.StartT(t, framework.Options{})
	ctx := t.Context()
	admin := cp.AdminClient(t)
	_, err = admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: itest.ChartNamespace}}, metav1.CreateOptions{})
	itest.Must(t, "create namespace", err)
	itest.Must(t, "apply chart", itest.ApplyAll(ctx, cp.AdminConfig(), itest.ChartNamespace, r.Objects))
	for _, n := range []string{"node-a", "node-b"} {
		_, err := admin.CoreV1().Nodes().Create(ctx, itest.Node(n, nil), metav1.CreateOptions{})
		itest.Must(t, "create node", err)
	}

	t.Run("kubelet plugin writes only its node's pool", func(t *testing.T) {
		testPluginIdentity(t, cp, admin)
	})
	t.Run("scheduler commits a gang and nothing else", func(t *testing.T) {
		testSchedulerIdentity(t, cp, admin)
	})
	t.Run("others cannot write what the scheduler trusts", func(t *testing.T) {
		testOthers(t, cp, admin)
	})
	t.Run("grouper writes only its groups, nobody else changes them", func(t *testing.T) {
		testGrouperIdentity(t, cp, admin)
	})
	t.Run("mock profile is accepted", func(t *testing.T) {
		// Another release in another namespace: no name clashes except the
		// DeviceClasses, which are the same.
		out, err := itest.RunHelm(ctx, helm, root, itest.TemplateArgs("gpufabric-mock", "gpufabric-mock", []string{mockValuesFile}, nil)...)
		itest.Must(t, "render mock profile", err)
		mock, err := itest.DecodeManifests(out)
		itest.Must(t, "decode mock profile", err)
		_, err = admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "gpufabric-mock"}}, metav1.CreateOptions{})
		itest.Must(t, "create namespace", err)
		itest.Must(t, "apply mock profile", itest.ApplyAll(ctx, cp.AdminConfig(), "gpufabric-mock", mock.Objects))
	})
	t.Run("kind example is accepted", func(t *testing.T) {
		examples, err := readExamples(root)
		itest.Must(t, "read examples", err)
		itest.Must(t, "apply examples", itest.ApplyAll(ctx, cp.AdminConfig(), "", examples.Objects))
		// The gates are on: nothing of the gang was dropped.
		pg, err := admin.SchedulingV1beta1().PodGroups("fabric-demo").Get(ctx, "train", metav1.GetOptions{})
		itest.Must(t, "get PodGroup", err)
		if pg.Spec.SchedulingConstraints == nil || len(pg.Spec.ResourceClaims) != 1 {
			t.Errorf("PodGroup lost fields: %+v", pg.Spec)
		}
		job, err := admin.BatchV1().Jobs("fabric-demo").Get(ctx, "train", metav1.GetOptions{})
		itest.Must(t, "get Job", err)
		if sg := job.Spec.Template.Spec.SchedulingGroup; sg == nil || ptr.Deref(sg.PodGroupName, "") != "train" {
			t.Errorf("Job pod template lost schedulingGroup: %+v", sg)
		}
	})
}

// token returns a client authenticated as a service account of the chart
// by a token from the TokenRequest API, bound to pod when it is set.
func token(t *testing.T, cp *framework.ControlPlane, admin kubernetes.Interface, sa string, pod *corev1.Pod) kubernetes.Interface {
	t.Helper()
	cfg := &rest.Config{
		Host:            cp.Host(),
		TLSClientConfig: rest.TLSClientConfig{CAData: cp.AdminConfig().CAData},
		BearerToken:     itest.ServiceAccountToken(t, admin, sa, pod),
	}
	c, err := kubernetes.NewForConfig(cfg)
	itest.Must(t, "client for "+sa, err)
	return c
}

// pluginPod is a pod of the chart's DaemonSet bound to nodeName.
func pluginPod(t *testing.T, admin kubernetes.Interface, nodeName string) *corev1.Pod {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: itest.ChartPluginName + "-" + nodeName, Namespace: itest.ChartNamespace},
		Spec: corev1.PodSpec{
			ServiceAccountName: itest.ChartPluginName,
			NodeName:           nodeName,
			Containers:         []corev1.Container{{Name: "plugin", Image: "registry.example/kubelet-plugin:1"}},
		},
	}
	pod, err := admin.CoreV1().Pods(itest.ChartNamespace).Create(t.Context(), pod, metav1.CreateOptions{})
	itest.Must(t, "create plugin pod", err)
	return pod
}

func create(c kubernetes.Interface, s *resourceapi.ResourceSlice) func(context.Context) error {
	return func(ctx context.Context) error {
		_, err := c.ResourceV1().ResourceSlices().Create(ctx, s, metav1.CreateOptions{})
		return err
	}
}

// namedSlice is a one-GPU slice of nodeName called name.
func namedSlice(name, nodeName string) *resourceapi.ResourceSlice {
	s := itest.GPUSlice(nodeName, "dom", 1)
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
