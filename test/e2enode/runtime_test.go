package e2enode

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpufabric/gpufabric/test/integration/framework"
)

// node is one real node on this machine: containerd (with the CDI spec
// directory of the plugin), the kubelet, and their directories, all under
// one temporary directory.
type node struct {
	t       *testing.T
	name    string
	bin     string // hack/build-node.sh's folder
	dir     string
	cp      *framework.ControlPlane
	cdiRoot string
}

func (n *node) path(elem ...string) string { return filepath.Join(append([]string{n.dir}, elem...)...) }
func (n *node) containerdSock() string     { return n.path("containerd", "containerd.sock") }
func (n *node) kubeletRoot() string        { return n.path("kubelet") }
func (n *node) podLogs() string            { return n.path("pod-logs") }

// RegistrarDir and PluginDir are the kubelet's, where the plugin must put
// its sockets.
func (n *node) RegistrarDir() string { return filepath.Join(n.kubeletRoot(), "plugins_registry") }
func (n *node) PluginDir() string    { return filepath.Join(n.kubeletRoot(), "plugins", "gpufabric.dev") }

// startContainerd writes a containerd 2.x config (runc from Debian,
// overlayfs, cgroupfs, CDI specs from cdiRoot, the test image as the
// sandbox image) and starts it, waiting for its socket.
func (n *node) startContainerd(ctx context.Context) {
	n.t.Helper()
	runc, err := exec.LookPath("runc")
	if err != nil {
		n.t.Fatalf("runc not found (apt-get install runc): %v", err)
	}
	cfg := fmt.Sprintf(`version = 3
root = %q
state = %q
[grpc]
  address = %q
[plugins.'io.containerd.cri.v1.images']
  snapshotter = "overlayfs"
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = %q
[plugins.'io.containerd.cri.v1.runtime']
  cdi_spec_dirs = [%q]
  restrict_oom_score_adj = true
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = "runc"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        BinaryName = %q
        SystemdCgroup = false
`, n.path("containerd", "root"), n.path("containerd", "state"), n.containerdSock(), imageName, n.cdiRoot, runc)
	framework.WriteFile(n.t, n.path("containerd.toml"), cfg)
	must(n.t, "start containerd", n.cp.StartProcess("containerd", filepath.Join(n.bin, "containerd"), "--config", n.path("containerd.toml")))
	n.waitFor(ctx, "containerd's socket", func() bool { _, err := os.Stat(n.containerdSock()); return err == nil })
}

// importImage imports the test image (an OCI archive) into containerd's
// Kubernetes namespace.
func (n *node) importImage(ctx context.Context, archive string) {
	n.t.Helper()
	out, err := exec.CommandContext(ctx, filepath.Join(n.bin, "ctr"), "--address", n.containerdSock(), "-n", "k8s.io",
		"images", "import", "--platform", "linux/amd64", archive).CombinedOutput()
	if err != nil {
		n.t.Fatalf("ctr images import: %v\n%s", err, out)
	}
}

// startKubelet writes a KubeletConfiguration for this machine (cgroup v1
// allowed, cgroupfs, no swap check, the control plane's feature gates, pod
// logs in the node's directory) and starts the kubelet as node n.name.
func (n *node) startKubelet(ctx context.Context) {
	n.t.Helper()
	ports := freePorts(n.t, 2)
	var gates strings.Builder
	for _, g := range strings.Split(framework.FeatureGates, ",") {
		if k, v, ok := strings.Cut(g, "="); ok {
			fmt.Fprintf(&gates, "  %s: %s\n", k, v)
		}
	}
	cfg := fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
failSwapOn: false
address: 127.0.0.1
port: %d
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: %d
authentication:
  anonymous: {enabled: true}
  webhook: {enabled: false}
authorization: {mode: AlwaysAllow}
containerRuntimeEndpoint: unix://%s
podLogsDir: %s
imageGCHighThresholdPercent: 100
evictionHard: {memory.available: "1Mi", nodefs.available: "1%%", imagefs.available: "1%%"}
syncFrequency: 2s
featureGates:
%s`, ports[0], ports[1], n.containerdSock(), n.podLogs(), gates.String())
	framework.WriteFile(n.t, n.path("kubelet.yaml"), cfg)
	must(n.t, "start kubelet", n.cp.StartProcess("kubelet", filepath.Join(n.bin, "kubelet"),
		"--config="+n.path("kubelet.yaml"), "--kubeconfig="+n.cp.KubeconfigPath(),
		"--root-dir="+n.kubeletRoot(), "--cert-dir="+n.path("kubelet-pki"),
		"--hostname-override="+n.name, "--node-ip=127.0.0.1", "--v=2"))
}

// cleanup stops what the test's pods left in containerd (the shims are
// not in the processes' groups), stops the kubelet and containerd, and
// unmounts everything below the node's directory.
func (n *node) cleanup() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ctr := func(args ...string) string {
		out, _ := exec.CommandContext(ctx, filepath.Join(n.bin, "ctr"), append([]string{"--address", n.containerdSock(), "-n", "k8s.io"}, args...)...).CombinedOutput()
		return string(out)
	}
	_ = n.cp.Signal("kubelet", syscall.SIGTERM)
	for _, line := range strings.Split(ctr("tasks", "ls", "-q"), "\n") {
		if id := strings.TrimSpace(line); id != "" {
			ctr("tasks", "kill", "-s", "SIGKILL", id)
			ctr("tasks", "delete", "-f", id)
		}
	}
	_ = n.cp.Signal("containerd", syscall.SIGTERM)
	time.Sleep(time.Second)
	unmountBelow(n.dir)
}

// unmountBelow lazily unmounts every mount under dir, deepest first.
func unmountBelow(dir string) {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return
	}
	var mounts []string
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) > 4 && strings.HasPrefix(f[4], dir) {
			mounts = append(mounts, f[4])
		}
	}
	for i := len(mounts) - 1; i >= 0; i-- {
		_ = syscall.Unmount(mounts[i], syscall.MNT_DETACH)
	}
}

func (n *node) waitFor(ctx context.Context, what string, cond func() bool) {
	n.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) || ctx.Err() != nil {
			n.t.Fatalf("timed out waiting for %s\n%s", what, n.cp.LogTails(40))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func freePorts(t *testing.T, n int) []int {
	t.Helper()
	var ports []int
	var ls []net.Listener
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
		_, p, _ := net.SplitHostPort(l.Addr().String())
		port, _ := strconv.Atoi(p)
		ports = append(ports, port)
	}
	for _, l := range ls {
		_ = l.Close()
	}
	return ports
}

func must(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}
