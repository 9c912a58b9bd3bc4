package e2enode

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	"github.com/gpufabric/gpufabric/pkg/topology"
	"github.com/gpufabric/gpufabric/test/integration/framework"
)

const (
	nodeName    = "gb200-r1-n01"
	fabric      = "pkg/devices/mock/fabrics/gb200-nvl72x2.yaml"
	imexChannel = 5
)

// report is what the probe printed first.
type report struct {
	Env   map[string]string `json:"env"`
	Files map[string]string `json:"files"`
}

// TestRealNode runs a pod on a real kubelet v1.37.1 with containerd 2.x and
// runc, with devices the plugin prepared on a mock GB200 tray: the
// container has the GPUs' and the HCA's device files, IMEX channel 5 as a
// character device of the driver's major, the driver's libraries and
// binaries with the symlinks nvidia-cdi-hook made, and gpufabric's
// variables. The plugin is restarted under the running pod: the pod keeps
// running, a second pod is prepared by the new plugin, and deleting the
// first pod unprepares its claims through it.
func TestRealNode(t *testing.T) {
	bin := os.Getenv("GPUFABRIC_NODE_BIN")
	if bin == "" {
		t.Skip("GPUFABRIC_NODE_BIN is not set: run make e2e-node (needs root, runc, cgroups, overlayfs)")
	}
	if os.Geteuid() != 0 {
		t.Skip("the real-node test runs containerd and the kubelet: it needs root")
	}
	_, ctx := ktesting.NewTestContext(t)
	t.Setenv("PATH", bin+":"+os.Getenv("PATH")) // containerd finds its shim on PATH
	cp := framework.StartT(t, framework.Options{})
	admin := cp.AdminClient(t)
	rules, err := framework.LoadRules(framework.PluginRulesFile)
	must(t, "load plugin rules", err)

	n := &node{t: t, name: nodeName, bin: bin, dir: t.TempDir(), cp: cp}
	t.Cleanup(n.cleanup) // before TempDir's removal: unmounts first
	plugin := framework.NewPlugin(t, cp.KubeconfigWithRules(t, "gpufabric-plugin", rules), fabric, nodeName)
	plugin.ExtraArgs = []string{
		"--registrar-dir=" + n.RegistrarDir(), "--plugin-data-dir=" + n.PluginDir(),
		"--nvidia-cdi-hook=" + filepath.Join(bin, "nvidia-cdi-hook"),
	}
	n.cdiRoot = plugin.CDIRoot()
	must(t, "create cdi root", os.MkdirAll(n.cdiRoot, 0o755))

	start := time.Now()
	n.startContainerd(ctx)
	n.importImage(ctx, buildImage(t))
	n.startKubelet(ctx)
	n.waitFor(ctx, "the kubelet to register the node", func() bool {
		_, err := admin.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
		return err == nil
	})
	plugin.Start()
	devs := waitDevices(t, admin)
	domain := *devs["gpu-0"].Attributes[topology.AttrNVLinkDomain].StringValue
	t.Logf("node up (containerd, kubelet, plugin) in %v", time.Since(start))

	paths := []string{"/dev/nvidia0", "/dev/nvidia1", "/dev/nvidiactl", "/dev/infiniband/uverbs0", "/dev/infiniband/rdma_cm",
		fmt.Sprintf("/dev/nvidia-caps-imex-channels/channel%d", imexChannel),
		"/usr/lib/x86_64-linux-gnu/libcuda.so", "/usr/bin/nvidia-smi", "/etc/ld.so.cache", "/dev/nvidia2"}
	first := runPod(t, admin, "train-0", paths, map[string][]string{
		"gpus":   {nodeName + "/gpu-0", nodeName + "/gpu-1", nodeName + "/" + topology.NICDeviceName("mlx5_0")},
		"fabric": {topology.FabricDomainPoolName(domain) + fmt.Sprintf("/channel-%d", imexChannel)},
	})
	got := readReport(t, n, first)
	wantFiles := map[string]string{
		"/dev/nvidia0": "file", "/dev/nvidia1": "file", "/dev/nvidiactl": "file", // mock device files, bind-mounted
		"/dev/infiniband/uverbs0": "file", "/dev/infiniband/rdma_cm": "file",
		fmt.Sprintf("/dev/nvidia-caps-imex-channels/channel%d", imexChannel): fmt.Sprintf("char 511:%d", imexChannel),
		"/usr/bin/nvidia-smi": "file", "/dev/nvidia2": "missing", // not allocated
		// nvidia-cdi-hook's create-symlinks and update-ldcache ran (the
		// mock's libraries are empty files: ldconfig makes no SONAME
		// links for them, but it writes the cache).
		"/usr/lib/x86_64-linux-gnu/libcuda.so": "symlink -> libcuda.so.1", "/etc/ld.so.cache": "file",
	}
	for p, want := range wantFiles {
		if got.Files[p] != want {
			t.Errorf("container %s: %q, want %q", p, got.Files[p], want)
		}
	}
	for k, want := range map[string]string{
		"GPUFABRIC_FABRIC_DOMAIN": domain, "GPUFABRIC_IMEX_CHANNEL": fmt.Sprint(imexChannel), "NCCL_MNNVL_ENABLE": "1",
		"NCCL_IB_HCA": "=mlx5_0", "NVIDIA_VISIBLE_DEVICES": "void",
	} {
		if got.Env[k] != want {
			t.Errorf("container env %s=%q, want %q", k, got.Env[k], want)
		}
	}
	if u := got.Env["GPUFABRIC_GPU_UUIDS"]; strings.Count(u, "GPU-") != 2 {
		t.Errorf("GPUFABRIC_GPU_UUIDS=%q, want two GPUs", u)
	}

	t.Run("plugin restart under a running pod", func(t *testing.T) {
		before := aliveCount(t, n, first)
		plugin.Stop()
		plugin.Start()
		waitDevices(t, admin)
		second := runPod(t, admin, "train-1", []string{"/dev/nvidia2"}, map[string][]string{"gpus": {nodeName + "/gpu-2"}})
		if f := readReport(t, n, second).Files["/dev/nvidia2"]; f != "file" {
			t.Errorf("pod prepared by the restarted plugin: /dev/nvidia2 is %q", f)
		}
		pod, err := admin.CoreV1().Pods(first.Namespace).Get(ctx, first.Name, metav1.GetOptions{})
		must(t, "get first pod", err)
		if pod.Status.Phase != corev1.PodRunning || restarts(pod) != 0 || aliveCount(t, n, first) <= before {
			t.Errorf("first pod after the plugin's restart: phase %s, restarts %d, alive %d (before %d)",
				pod.Status.Phase, restarts(pod), aliveCount(t, n, first), before)
		}
		// Deleting the pod unprepares its claims through the new plugin.
		must(t, "delete first pod", admin.CoreV1().Pods(first.Namespace).Delete(ctx, first.Name, metav1.DeleteOptions{}))
		err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 90*time.Second, true, func(ctx context.Context) (bool, error) {
			_, err := admin.CoreV1().Pods(first.Namespace).Get(ctx, first.Name, metav1.GetOptions{})
			specs, _ := filepath.Glob(filepath.Join(plugin.CDIRoot(), "*.json"))
			return apierrors.IsNotFound(err) && len(specs) == 1, nil
		})
		must(t, "wait for the first pod's claims to be unprepared (one spec left, the second pod's)", err)
	})
}

// waitDevices waits until the plugin published the tray's 8 devices.
func waitDevices(t *testing.T, c kubernetes.Interface) map[string]resourceapi.Device {
	t.Helper()
	devs := map[string]resourceapi.Device{}
	err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		l, err := c.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + nodeName})
		if err != nil {
			return false, nil
		}
		for _, s := range l.Items {
			for _, d := range s.Spec.Devices {
				devs[d.Name] = d
			}
		}
		return len(devs) == 8, nil
	})
	must(t, "wait for the node's devices", err)
	return devs
}

// runPod creates a host-network pod on the node whose container runs the
// probe on paths, with one claim per entry of claims (allocated to those
// pool/device results and reserved for the pod, as a scheduler would), and
// waits until it runs.
func runPod(t *testing.T, c kubernetes.Interface, name string, paths []string, claims map[string][]string) *corev1.Pod {
	t.Helper()
	ctx := t.Context()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceDefault, Name: name},
		Spec: corev1.PodSpec{
			NodeName: nodeName, HostNetwork: true,
			AutomountServiceAccountToken:  ptr.To(false),
			TerminationGracePeriodSeconds: ptr.To[int64](2),
			Containers: []corev1.Container{{
				Name: "probe", Image: imageName, ImagePullPolicy: corev1.PullNever,
				Args: append([]string{"check"}, paths...),
			}},
		},
	}
	for _, req := range slices.Sorted(maps.Keys(claims)) {
		claimName := name + "-" + req
		pod.Spec.ResourceClaims = append(pod.Spec.ResourceClaims, corev1.PodResourceClaim{Name: req, ResourceClaimName: ptr.To(claimName)})
		pod.Spec.Containers[0].Resources.Claims = append(pod.Spec.Containers[0].Resources.Claims, corev1.ResourceClaim{Name: req})
	}
	pod, err := c.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{})
	must(t, "create pod "+name, err)
	for _, req := range slices.Sorted(maps.Keys(claims)) {
		allocate(t, c, name+"-"+req, req, claims[req], pod)
	}
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 120*time.Second, true, func(ctx context.Context) (bool, error) {
		pod, err = c.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		return err == nil && pod.Status.Phase == corev1.PodRunning, nil
	})
	if err != nil {
		t.Fatalf("pod %s did not run: %v; status %+v", name, err, pod.Status)
	}
	return pod
}

// allocate creates a claim whose one request has the given results.
func allocate(t *testing.T, c kubernetes.Interface, name, req string, devices []string, pod *corev1.Pod) {
	t.Helper()
	ctx := t.Context()
	claim := &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace, Name: name},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
			Name: req, Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: topology.GPUDeviceClass, Count: int64(len(devices))},
		}}}},
	}
	claim, err := c.ResourceV1().ResourceClaims(claim.Namespace).Create(ctx, claim, metav1.CreateOptions{})
	must(t, "create claim "+name, err)
	var results []resourceapi.DeviceRequestAllocationResult
	for _, pd := range devices {
		pool, dev, _ := strings.Cut(pd, "/")
		results = append(results, resourceapi.DeviceRequestAllocationResult{Request: req, Driver: topology.DriverName, Pool: pool, Device: dev})
	}
	claim.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: results}}
	claim.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: pod.Name, UID: pod.UID}}
	_, err = c.ResourceV1().ResourceClaims(claim.Namespace).UpdateStatus(ctx, claim, metav1.UpdateOptions{})
	must(t, "allocate claim "+name, err)
}

// logLines returns the output lines of the container's latest run from the
// kubelet's log files (<restart count>.log, CRI format "<time> stdout F
// <line>").
func logLines(t *testing.T, n *node, pod *corev1.Pod) []string {
	t.Helper()
	dir := filepath.Join(n.podLogs(), fmt.Sprintf("%s_%s_%s", pod.Namespace, pod.Name, pod.UID), "probe")
	logs, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	if len(logs) == 0 {
		return nil
	}
	run := func(p string) int {
		n, _ := strconv.Atoi(strings.TrimSuffix(filepath.Base(p), ".log"))
		return n
	}
	slices.SortFunc(logs, func(a, b string) int { return run(a) - run(b) })
	f, err := os.Open(logs[len(logs)-1])
	if err != nil {
		return nil
	}
	defer func() { _ = f.Close() }()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if f := strings.SplitN(sc.Text(), " ", 4); len(f) == 4 {
			lines = append(lines, f[3])
		}
	}
	return lines
}

func readReport(t *testing.T, n *node, pod *corev1.Pod) report {
	t.Helper()
	var r report
	err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		lines := logLines(t, n, pod)
		return len(lines) > 0 && json.Unmarshal([]byte(lines[0]), &r) == nil, nil
	})
	if err != nil {
		cur, _ := n.cp.AdminClient(t).CoreV1().Pods(pod.Namespace).Get(t.Context(), pod.Name, metav1.GetOptions{})
		t.Fatalf("no report from pod %s: %v; log lines %q; status %+v\n%s", pod.Name, err, logLines(t, n, pod), cur.Status, n.cp.LogTails(30))
	}
	t.Logf("pod %s: %+v", pod.Name, r)
	return r
}

// aliveCount is the probe's last heartbeat number.
func aliveCount(t *testing.T, n *node, pod *corev1.Pod) int {
	t.Helper()
	last := -1
	for _, l := range logLines(t, n, pod) {
		var k int
		if _, err := fmt.Sscanf(l, "alive %d", &k); err == nil {
			last = k
		}
	}
	return last
}

func restarts(pod *corev1.Pod) int32 {
	var r int32
	for _, s := range pod.Status.ContainerStatuses {
		r += s.RestartCount
	}
	return r
}
