package framework

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"
)

// PluginRulesFile holds the RBAC rules the chart ships for the plugin.
const PluginRulesFile = "deployments/helm/gpufabric/files/rbac/kubelet-plugin.yaml"

// PluginBinary builds cmd/kubelet-plugin once per test process (or uses
// $GPUFABRIC_PLUGIN_BIN), so tests run the real binary as the DaemonSet does.
func PluginBinary(t testing.TB) string {
	t.Helper()
	return goBinary(t, "kubelet-plugin", "./cmd/kubelet-plugin", "GPUFABRIC_PLUGIN_BIN")
}

// SchedulerBinary builds cmd/scheduler once per test process (or uses
// $GPUFABRIC_SCHEDULER_BIN), for tests that run real scheduler processes.
func SchedulerBinary(t testing.TB) string {
	t.Helper()
	return goBinary(t, "gpufabric-scheduler", "./cmd/scheduler", "GPUFABRIC_SCHEDULER_BIN")
}

var goBuilds = struct {
	mu     sync.Mutex
	byPkg  map[string]string
	failed map[string]error
}{byPkg: map[string]string{}, failed: map[string]error{}}

// goBinary builds a package of this module once per test process into a
// temp dir, or returns $envVar when it is set.
func goBinary(t testing.TB, name, pkg, envVar string) string {
	t.Helper()
	if p := os.Getenv(envVar); p != "" {
		return p
	}
	goBuilds.mu.Lock()
	defer goBuilds.mu.Unlock()
	if p, ok := goBuilds.byPkg[pkg]; ok {
		return p
	}
	if err := goBuilds.failed[pkg]; err != nil {
		t.Fatal(err)
	}
	path, err := buildGo(name, pkg)
	if err != nil {
		goBuilds.failed[pkg] = err
		t.Fatal(err)
	}
	goBuilds.byPkg[pkg] = path
	return path
}

func buildGo(name, pkg string) (string, error) {
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	dir, err := os.MkdirTemp("", "gpufabric-bin-")
	if err != nil {
		return "", fmt.Errorf("create bin dir: %w", err)
	}
	path := filepath.Join(dir, name)
	cmd := exec.Command("go", "build", "-o", path, pkg)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_CFLAGS=-Wno-deprecated-declarations")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build %s: %w\n%s", pkg, err, out)
	}
	return path, nil
}

// Plugin is one kubelet-plugin process in mock mode with its own
// directories, as on one node. Its dirs survive restarts (Start again).
type Plugin struct {
	t          testing.TB
	Node       string
	kubeconfig string
	// Fabric is the plugin's own copy of the fabric file; edit it to inject
	// faults (the plugin re-reads it every second).
	Fabric string
	// ExtraArgs are appended to the command line at the next Start.
	ExtraArgs []string
	dir       string // root of all its dirs
	cmd       *exec.Cmd
	done      chan struct{}
}

func (p *Plugin) RegistrarDir() string { return filepath.Join(p.dir, "registry") }
func (p *Plugin) PluginDir() string    { return filepath.Join(p.dir, "plugin") }
func (p *Plugin) CDIRoot() string      { return filepath.Join(p.dir, "cdi") }
func (p *Plugin) StateDir() string     { return filepath.Join(p.dir, "state") }
func (p *Plugin) BootIDFile() string   { return filepath.Join(p.dir, "boot_id") }
func (p *Plugin) LogFile() string      { return filepath.Join(p.dir, "plugin.log") }

// NewPlugin prepares (but does not start) a plugin for node, authenticated
// by kubeconfig, with its own copy of fabricFile (relative to the repo root).
func NewPlugin(t testing.TB, kubeconfig, fabricFile, node string) *Plugin {
	t.Helper()
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	p := &Plugin{t: t, Node: node, kubeconfig: kubeconfig, dir: t.TempDir()}
	data, err := os.ReadFile(filepath.Join(root, fabricFile))
	if err != nil {
		t.Fatal(err)
	}
	p.Fabric = filepath.Join(p.dir, "fabric.yaml")
	WriteFile(t, p.Fabric, string(data))
	WriteFile(t, p.BootIDFile(), "11111111-1111-1111-1111-111111111111\n")
	t.Cleanup(p.Stop)
	return p
}

// Twin is a second plugin on the same node and directories, as the new pod
// of a DaemonSet rolling update (surge) is. Start it with its own --pod-uid.
func (p *Plugin) Twin() *Plugin {
	twin := *p
	twin.cmd, twin.done, twin.ExtraArgs = nil, nil, nil
	p.t.Cleanup(twin.Stop)
	return &twin
}

// Start starts the process.
func (p *Plugin) Start() {
	p.t.Helper()
	log, err := os.OpenFile(p.LogFile(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		p.t.Fatal(err)
	}
	defer log.Close()
	p.cmd = exec.Command(PluginBinary(p.t), "run",
		"--node="+p.Node, "--kubeconfig="+p.kubeconfig,
		"--backend=mock", "--mock-fabric="+p.Fabric,
		"--plugin-data-dir="+p.PluginDir(), "--registrar-dir="+p.RegistrarDir(),
		"--cdi-root="+p.CDIRoot(), "--state-dir="+p.StateDir(),
		"--boot-id-path="+p.BootIDFile(), "--health-interval=1s", "-v=1")
	p.cmd.Args = append(p.cmd.Args, p.ExtraArgs...)
	p.cmd.Stdout, p.cmd.Stderr = log, log
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		p.t.Fatalf("start plugin: %v", err)
	}
	p.done = make(chan struct{})
	go func(cmd *exec.Cmd, done chan struct{}) { _ = cmd.Wait(); close(done) }(p.cmd, p.done)
}

// Stop ends the plugin (SIGTERM, then SIGKILL). Idempotent. A failed
// test gets the tail of the plugin's log.
func (p *Plugin) Stop() {
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
		data, _ := os.ReadFile(p.LogFile())
		p.t.Logf("plugin %s log:\n%s", p.Node, tail(string(data), 8000))
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// WriteFile writes data to path or fails the test.
func WriteFile(t testing.TB, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
}
