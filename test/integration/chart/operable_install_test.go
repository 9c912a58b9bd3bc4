package chart

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/gpufabric/gpufabric/pkg/gang/freeroom"
	"github.com/gpufabric/gpufabric/pkg/topology"
	"github.com/gpufabric/gpufabric/test/integration/framework"
	"github.com/gpufabric/gpufabric/test/integration/itest"
)

// helmOn runs helm against the control plane as its admin.
func helmOn(ctx context.Context, cp *framework.ControlPlane, helm, root string, args ...string) ([]byte, error) {
	return itest.RunHelm(ctx, helm, root, append(args, "--kubeconfig", cp.KubeconfigPath())...)
}

// installArgs install (or upgrade) the chart with default values.
func installArgs(extra ...string) []string {
	return append([]string{"upgrade", "--install", itest.ChartReleaseName, itest.ChartDir, "--namespace", itest.ChartNamespace, "--create-namespace"}, extra...)
}

// TestChartInstallUninstall installs the chart with helm on a real
// apiserver (with kube-controller-manager: its garbage collector and
// DaemonSet controller). The install refuses a cluster where NVIDIA's
// device plugin runs or NVIDIA's DRA driver for GPUs is installed, naming
// it and the fix; a real gpufabric-scheduler, run as the chart's identity,
// leads and publishes fabric-domain pools and the free-room view; after it
// stopped, `helm uninstall` leaves nothing of gpufabric's in the
// apiserver: the chart's objects, the Lease, the pools and the view (owned
// by the fabric-domain DeviceClass) all go.
func TestChartInstallUninstall(t *testing.T) {
	helm, root := itest.HelmTool(t)
	cp := framework.StartT(t, framework.Options{ControllerManager: true})
	ctx := t.Context()
	admin := cp.AdminClient(t)
	for _, n := range []string{"gpu-a", "gpu-b"} {
		_, err := admin.CoreV1().Nodes().Create(ctx, itest.Node(n, nil), metav1.CreateOptions{})
		itest.Must(t, "create node", err)
	}

	t.Run("refused beside NVIDIA's GPU allocators", func(t *testing.T) {
		testRefusedBesideNVIDIA(t, cp, admin, helm, root)
	})
	_, err := helmOn(ctx, cp, helm, root, installArgs()...)
	itest.Must(t, "helm install", err)

	podName := itest.ChartSchedulerName + "-0"
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: podName, Namespace: itest.ChartNamespace},
		Spec:       corev1.PodSpec{ServiceAccountName: itest.ChartSchedulerName, Containers: []corev1.Container{{Name: "scheduler", Image: "registry.example/scheduler:1"}}},
	}
	pod, err = admin.CoreV1().Pods(itest.ChartNamespace).Create(ctx, pod, metav1.CreateOptions{})
	itest.Must(t, "create the scheduler's pod", err)
	kc := tokenKubeconfig(t, cp, itest.ServiceAccountToken(t, admin, itest.ChartSchedulerName, pod))
	for _, n := range []string{"gpu-a", "gpu-b"} {
		s := itest.GPUSlice(n, "dom-1", 4)
		_, err := admin.ResourceV1().ResourceSlices().Create(ctx, s, metav1.CreateOptions{})
		itest.Must(t, "create node slice", err)
	}
	addr := freeAddr(t)
	itest.Must(t, "start scheduler", cp.StartProcess("uninstall-scheduler", framework.SchedulerBinary(t), "--kubeconfig="+kc,
		"--leader-elect=true", "--leader-elect-namespace="+itest.ChartNamespace, "--leader-elect-identity="+podName,
		"--commit-record-namespace="+itest.ChartNamespace, "--domain-channels=2", "--metrics-address="+addr))
	class, err := admin.ResourceV1().DeviceClasses().Get(ctx, topology.FabricDomainDeviceClass, metav1.GetOptions{})
	itest.Must(t, "get the fabric-domain class", err)
	itest.Poll(t, "the Lease and the fabric-domain pools owned by the class", 60*time.Second, func(ctx context.Context) error {
		lease, err := admin.CoordinationV1().Leases(itest.ChartNamespace).Get(ctx, itest.ChartSchedulerName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if !ownedBy(lease.OwnerReferences, class) {
			return fmt.Errorf("lease owners %+v", lease.OwnerReferences)
		}
		slices, err := admin.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		pools := 0
		for _, s := range slices.Items {
			if s.Spec.NodeName == nil && s.Spec.Driver == topology.DriverName {
				if !ownedBy(s.OwnerReferences, class) {
					return fmt.Errorf("pool slice %s owners %+v", s.Name, s.OwnerReferences)
				}
				pools++
			}
		}
		if pools == 0 {
			return fmt.Errorf("no fabric-domain pool yet")
		}
		view, err := admin.CoreV1().ConfigMaps(itest.ChartNamespace).Get(ctx, freeroom.ConfigMapName, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("free-room view: %w", err)
		}
		if !ownedBy(view.OwnerReferences, class) {
			return fmt.Errorf("free-room view owners %+v", view.OwnerReferences)
		}
		return checkHealth(ctx, addr, "/readyz", 200, "")
	})
	itest.Must(t, "stop scheduler", cp.Signal("uninstall-scheduler", syscall.SIGTERM))
	itest.Poll(t, "the scheduler exits", 30*time.Second, func(context.Context) error {
		if done, _ := cp.Exited("uninstall-scheduler"); !done {
			return fmt.Errorf("still running")
		}
		return nil
	})
	itest.Must(t, "delete the scheduler's pod", admin.CoreV1().Pods(itest.ChartNamespace).Delete(ctx, podName, metav1.DeleteOptions{}))

	_, err = helmOn(ctx, cp, helm, root, "uninstall", itest.ChartReleaseName, "--namespace", itest.ChartNamespace, "--wait", "--timeout", "2m")
	itest.Must(t, "helm uninstall", err)
	itest.Poll(t, "nothing of gpufabric's left", 90*time.Second, func(ctx context.Context) error {
		left, err := leftovers(ctx, cp)
		if err != nil {
			return err
		}
		if len(left) > 0 {
			return fmt.Errorf("left after helm uninstall: %s", strings.Join(left, ", "))
		}
		return nil
	})
}

// testRefusedBesideNVIDIA: helm refuses to install while NVIDIA's device
// plugin runs on nodes or NVIDIA's DRA driver for GPUs is installed, unless
// allowed; a device plugin DaemonSet kept off every node is no obstacle.
func testRefusedBesideNVIDIA(t *testing.T, cp *framework.ControlPlane, admin kubernetes.Interface, helm, root string) {
	ctx := t.Context()
	itest.Must(t, "namespace", framework.EnsureNamespace(ctx, admin, "gpu-operator"))
	labels := map[string]string{"app": "nvidia-device-plugin-daemonset"}
	ds := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: "nvidia-device-plugin-daemonset", Namespace: "gpu-operator", Labels: labels},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
					Containers:  []corev1.Container{{Name: "nvidia-device-plugin", Image: "nvcr.io/nvidia/k8s-device-plugin:v0.17.0"}},
				},
			},
		},
	}
	_, err := admin.AppsV1().DaemonSets("gpu-operator").Create(ctx, ds, metav1.CreateOptions{})
	itest.Must(t, "create NVIDIA's device plugin", err)
	waitDaemonSet := func(want int32) {
		t.Helper()
		itest.Poll(t, fmt.Sprintf("device plugin DaemonSet wants %d nodes", want), 60*time.Second, func(ctx context.Context) error {
			got, err := admin.AppsV1().DaemonSets("gpu-operator").Get(ctx, ds.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if got.Status.ObservedGeneration != got.Generation || got.Status.DesiredNumberScheduled != want {
				return fmt.Errorf("status %+v at generation %d", got.Status, got.Generation)
			}
			return nil
		})
	}
	dryRun := func(extra ...string) error {
		_, err := helmOn(ctx, cp, helm, root, installArgs(append([]string{"--dry-run=server"}, extra...)...)...)
		return err
	}
	expectRefused := func(step, want string) {
		t.Helper()
		err := dryRun()
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "preflight.allowNVIDIAGPUAllocators=true") ||
			!strings.Contains(err.Error(), "devicePlugin.enabled=false") {
			t.Errorf("%s: want a refusal naming %q and the fixes, got %v", step, want, err)
		}
		if err := dryRun("--set", "preflight.allowNVIDIAGPUAllocators=true"); err != nil {
			t.Errorf("%s, allowed: %v", step, err)
		}
	}
	waitDaemonSet(2)
	expectRefused("device plugin on two nodes", "NVIDIA's device plugin (DaemonSet gpu-operator/nvidia-device-plugin-daemonset, on 2 nodes) runs in this cluster")

	// The GPU Operator's way to keep its device plugin off nodes.
	got, err := admin.AppsV1().DaemonSets("gpu-operator").Get(ctx, ds.Name, metav1.GetOptions{})
	itest.Must(t, "get DaemonSet", err)
	got.Spec.Template.Spec.NodeSelector = map[string]string{"nvidia.com/gpu.deploy.device-plugin": "true"}
	_, err = admin.AppsV1().DaemonSets("gpu-operator").Update(ctx, got, metav1.UpdateOptions{})
	itest.Must(t, "keep the device plugin off every node", err)
	waitDaemonSet(0)
	if err := dryRun(); err != nil {
		t.Errorf("device plugin on no node: %v", err)
	}

	dra := &resourceapi.DeviceClass{
		ObjectMeta: metav1.ObjectMeta{Name: "gpu.nvidia.com"},
		Spec:       resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: `device.driver == "gpu.nvidia.com"`}}}},
	}
	_, err = admin.ResourceV1().DeviceClasses().Create(ctx, dra, metav1.CreateOptions{})
	itest.Must(t, "install NVIDIA's DRA driver's class", err)
	expectRefused("DRA driver for GPUs", "NVIDIA's DRA driver for GPUs (DeviceClass gpu.nvidia.com) runs in this cluster")
	itest.Must(t, "delete the class", admin.ResourceV1().DeviceClasses().Delete(ctx, dra.Name, metav1.DeleteOptions{}))
	itest.Must(t, "delete the DaemonSet", admin.AppsV1().DaemonSets("gpu-operator").Delete(ctx, ds.Name, metav1.DeleteOptions{}))
}

func ownedBy(refs []metav1.OwnerReference, class *resourceapi.DeviceClass) bool {
	return slices.ContainsFunc(refs, func(r metav1.OwnerReference) bool {
		return r.UID == class.UID && r.Kind == "DeviceClass" && r.APIVersion == "resource.k8s.io/v1"
	})
}

// tokenKubeconfig writes a kubeconfig that authenticates with token.
func tokenKubeconfig(t *testing.T, cp *framework.ControlPlane, token string) string {
	t.Helper()
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["cp"] = &clientcmdapi.Cluster{Server: cp.Host(), CertificateAuthorityData: cp.AdminConfig().CAData}
	cfg.AuthInfos["sa"] = &clientcmdapi.AuthInfo{Token: token}
	cfg.Contexts["cp"] = &clientcmdapi.Context{Cluster: "cp", AuthInfo: "sa"}
	cfg.CurrentContext = "cp"
	path := filepath.Join(t.TempDir(), "token.kubeconfig")
	itest.Must(t, "write kubeconfig", clientcmd.WriteToFile(*cfg, path))
	return path
}

// leftovers lists every object in the apiserver that is gpufabric's: named
// after it, labelled or annotated by its release, in its release namespace
// (but the namespace's own default ServiceAccount and root CA), or a
// cluster-level slice of its driver. Events, which expire, and node-local
// slices, which the kubelet deletes when the plugin unregisters (no kubelet
// here), are not counted; nor is the release namespace itself, which
// `helm install --create-namespace` made and helm never deletes.
func leftovers(ctx context.Context, cp *framework.ControlPlane) ([]string, error) {
	dc, err := discovery.NewDiscoveryClientForConfig(cp.AdminConfig())
	if err != nil {
		return nil, err
	}
	dyn, err := dynamic.NewForConfig(cp.AdminConfig())
	if err != nil {
		return nil, err
	}
	lists, err := dc.ServerPreferredResources()
	if err != nil {
		return nil, err
	}
	var left []string
	for _, l := range lists {
		gv, err := schema.ParseGroupVersion(l.GroupVersion)
		if err != nil {
			return nil, err
		}
		for _, r := range l.APIResources {
			if strings.Contains(r.Name, "/") || !slices.Contains(r.Verbs, "list") || r.Kind == "Event" || r.Kind == "Namespace" {
				continue
			}
			items, err := dyn.Resource(gv.WithResource(r.Name)).List(ctx, metav1.ListOptions{})
			if err != nil {
				return nil, fmt.Errorf("list %s: %w", r.Name, err)
			}
			for _, u := range items.Items {
				ns, name := u.GetNamespace(), u.GetName()
				driver, _, _ := unstructured.NestedString(u.Object, "spec", "driver")
				nodeName, _, _ := unstructured.NestedString(u.Object, "spec", "nodeName")
				ours := strings.Contains(name, "gpufabric") ||
					u.GetLabels()["app.kubernetes.io/instance"] == itest.ChartReleaseName ||
					u.GetAnnotations()["meta.helm.sh/release-name"] == itest.ChartReleaseName ||
					ns == itest.ChartNamespace && !(r.Kind == "ServiceAccount" && name == "default" || r.Kind == "ConfigMap" && name == "kube-root-ca.crt") ||
					r.Kind == "ResourceSlice" && driver == topology.DriverName && nodeName == ""
				if r.Kind == "ResourceSlice" && nodeName != "" {
					ours = false
				}
				if ours {
					left = append(left, fmt.Sprintf("%s %s/%s", r.Kind, ns, name))
				}
			}
		}
	}
	return left, nil
}
