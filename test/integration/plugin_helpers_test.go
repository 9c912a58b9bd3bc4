package integration

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"

	"github.com/gpufabric/gpufabric/pkg/topology"
	"github.com/gpufabric/gpufabric/test/integration/framework"
)

const pluginRulesFile = "deployments/helm/gpufabric/files/rbac/kubelet-plugin.yaml"

var pluginBuild struct {
	once sync.Once
	path string
	err  error
}

// pluginBinary builds cmd/kubelet-plugin once per test process (or uses
// $GPUFABRIC_PLUGIN_BIN), so tests run the real binary as the DaemonSet does.
func pluginBinary(t *testing.T) string {
	t.Helper()
	pluginBuild.once.Do(func() {
		if p := os.Getenv("GPUFABRIC_PLUGIN_BIN"); p != "" {
			pluginBuild.path = p
			return
		}
		root, err := framework.RepoRoot()
		if err != nil {
			pluginBuild.err = err
			return
		}
		dir, err := os.MkdirTemp("", "gpufabric-plugin-bin-")
		if err != nil {
			pluginBuild.err = err
			return
		}
		pluginBuild.path = filepath.Join(dir, "kubelet-plugin")
		cmd := exec.Command("go", "build", "-o", pluginBuild.path, "./cmd/kubelet-plugin")
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "CGO_CFLAGS=-Wno-deprecated-declarations")
		if out, err := cmd.CombinedOutput(); err != nil {
			pluginBuild.err = fmt.Errorf("build kubelet-plugin: %w\n%s", err, out)
		}
	})
	if pluginBuild.err != nil {
		t.Fatal(pluginBuild.err)
	}
	return pluginBuild.path
}

// pluginProc is one kubelet-plugin process with its own directories, as on
// one node. Its dirs survive restarts (start again with the same dirs).
type pluginProc struct {
	t          *testing.T
	node       string
	kubeconfig string
	fabric     string
	dir        string // root of all its dirs
	cmd        *exec.Cmd
	done       chan struct{}
}

func (p *pluginProc) registrarDir() string { return filepath.Join(p.dir, "registry") }
func (p *pluginProc) pluginDir() string    { return filepath.Join(p.dir, "plugin") }
func (p *pluginProc) cdiRoot() string      { return filepath.Join(p.dir, "cdi") }
func (p *pluginProc) stateDir() string     { return filepath.Join(p.dir, "state") }
func (p *pluginProc) bootIDFile() string   { return filepath.Join(p.dir, "boot_id") }
func (p *pluginProc) logFile() string      { return filepath.Join(p.dir, "plugin.log") }

// newPlugin prepares (but does not start) a plugin for node, with a copy of
// fabricFile that the test may edit to inject faults.
func newPlugin(t *testing.T, kubeconfig, fabricFile, node string) *pluginProc {
	t.Helper()
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	p := &pluginProc{t: t, node: node, kubeconfig: kubeconfig, dir: t.TempDir()}
	data, err := os.ReadFile(filepath.Join(root, fabricFile))
	if err != nil {
		t.Fatal(err)
	}
	p.fabric = filepath.Join(p.dir, "fabric.yaml")
	writeFile(t, p.fabric, string(data))
	writeFile(t, p.bootIDFile(), "11111111-1111-1111-1111-111111111111\n")
	t.Cleanup(p.stop)
	return p
}

func (p *pluginProc) start() {
	p.t.Helper()
	log, err := os.OpenFile(p.logFile(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		p.t.Fatal(err)
	}
	defer log.Close()
	p.cmd = exec.Command(pluginBinary(p.t), "run",
		"--node="+p.node, "--kubeconfig="+p.kubeconfig,
		"--backend=mock", "--mock-fabric="+p.fabric,
		"--plugin-data-dir="+p.pluginDir(), "--registrar-dir="+p.registrarDir(),
		"--cdi-root="+p.cdiRoot(), "--state-dir="+p.stateDir(),
		"--boot-id-path="+p.bootIDFile(), "--health-interval=1s", "-v=1")
	p.cmd.Stdout, p.cmd.Stderr = log, log
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		p.t.Fatalf("start plugin: %v", err)
	}
	p.done = make(chan struct{})
	go func(cmd *exec.Cmd, done chan struct{}) { _ = cmd.Wait(); close(done) }(p.cmd, p.done)
}

// stop ends the plugin (SIGTERM, then SIGKILL). Idempotent.
func (p *pluginProc) stop() {
	if p.cmd == nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
	p.cmd = nil
	if p.t.Failed() {
		data, _ := os.ReadFile(p.logFile())
		p.t.Logf("plugin %s log:\n%s", p.node, tail(string(data), 4000))
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

func writeFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
}

// nodeSlices returns the node-local slices of gpufabric.dev for node.
func nodeSlices(ctx context.Context, c kubernetes.Interface, node string) ([]resourceapi.ResourceSlice, error) {
	list, err := c.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{
		FieldSelector: resourceapi.ResourceSliceSelectorNodeName + "=" + node + "," + resourceapi.ResourceSliceSelectorDriver + "=" + topology.DriverName,
	})
	if err != nil {
		return nil, err
	}
	return list.Items, nil
}

// waitSlices polls until cond holds for node's slices, returning them.
func waitSlices(t *testing.T, c kubernetes.Interface, node string, cond func([]resourceapi.ResourceSlice) bool) []resourceapi.ResourceSlice {
	t.Helper()
	var got []resourceapi.ResourceSlice
	err := wait.PollUntilContextTimeout(t.Context(), 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		var err error
		got, err = nodeSlices(ctx, c, node)
		return err == nil && cond(got), nil
	})
	if err != nil {
		t.Fatalf("slices of %s did not reach the expected state: %v (have %d slices)", node, err, len(got))
	}
	return got
}

// devicesOf flattens slices into devices by name.
func devicesOf(slices []resourceapi.ResourceSlice) map[string]resourceapi.Device {
	out := map[string]resourceapi.Device{}
	for _, s := range slices {
		for _, d := range s.Spec.Devices {
			out[d.Name] = d
		}
	}
	return out
}

// kubeletClients connects to the plugin's sockets as the kubelet does:
// GetInfo on the registration socket names the DRA endpoint.
func kubeletClients(t *testing.T, p *pluginProc) drapb.DRAPluginClient {
	t.Helper()
	regSock := filepath.Join(p.registrarDir(), topology.DriverName+"-reg.sock")
	var info *registerapi.PluginInfo
	err := wait.PollUntilContextTimeout(t.Context(), 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		conn, err := grpc.NewClient("unix://"+regSock, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return false, nil
		}
		defer conn.Close()
		info, err = registerapi.NewRegistrationClient(conn).GetInfo(ctx, &registerapi.InfoRequest{})
		return err == nil, nil
	})
	if err != nil {
		t.Fatalf("registration GetInfo on %s: %v", regSock, err)
	}
	if info.Type != registerapi.DRAPlugin || info.Name != topology.DriverName {
		t.Fatalf("registration info: got type %q name %q", info.Type, info.Name)
	}
	conn, err := grpc.NewClient("unix://"+info.Endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatalf("connect to %s: %v", info.Endpoint, err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return drapb.NewDRAPluginClient(conn)
}
