// Package framework runs a real Kubernetes 1.37 control plane for tests and
// the demo: etcd and kube-apiserver, optionally kube-controller-manager and
// kwok, built from the Go module proxy (hack/build-control-plane.sh) and
// started on free loopback ports with the gates gpufabric needs.
//
// Rules: every process it starts is recorded by PID under a state dir owned by
// the calling process; Stop is idempotent; a later Start stops the processes
// of control planes whose owner died and removes their dirs.
package framework

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
)

// FeatureGates are the gates every gpufabric control plane runs with.
// WorkloadWithJob lets the Job controller create the Workload and PodGroup
// of a Job with spec.scheduling (off, the field is silently dropped).
const FeatureGates = "GenericWorkload=true,DRAWorkloadResourceClaims=true,TopologyAwareWorkloadScheduling=true,WorkloadWithJob=true"

// RuntimeConfig enables the v1beta1 PodGroup API.
const RuntimeConfig = "scheduling.k8s.io/v1beta1=true"

// Options choose the optional components.
type Options struct {
	// ControllerManager starts kube-controller-manager (claims from
	// templates, namespaces' default service accounts, garbage collection).
	ControllerManager bool
	// Kwok starts kwok, which runs the lifecycle of pods on nodes
	// annotated kwok.x-k8s.io/node=fake.
	Kwok bool
	// KubeScheduler starts kube-scheduler v1.37.1 (default profile, the
	// same gates) as system:kube-scheduler, beside whatever the test runs.
	KubeScheduler bool
	// StateRoot holds the state dirs; default: $TMPDIR/gpufabric-framework.
	StateRoot string
	// ControllerManagerQPS, when > 0, is kube-controller-manager's client
	// rate limit (burst twice that) instead of its default 20: thousands of
	// kwok nodes clear their not-ready taints that much faster.
	ControllerManagerQPS int
	// ExtraFeatureGates are added to FeatureGates for every component
	// ("Gate=true,…"), e.g. PodGroupPreemptionPolicy for the comparison
	// with kube-scheduler's workload-aware preemption.
	ExtraFeatureGates string
	// CompositePodGroups turns the CompositePodGroup gate on for every
	// component and serves scheduling.k8s.io/v1alpha3 (KEP-6012).
	CompositePodGroups bool
	// WithoutPodGroupAPI starts kube-apiserver without RuntimeConfig, as a
	// cluster that never enabled scheduling.k8s.io/v1beta1: PodGroups are
	// not served (the gates stay on).
	WithoutPodGroupAPI bool
	// NodeMonitorGracePeriod, when > 0, is how long kube-controller-manager
	// lets a node go without a heartbeat before its node lifecycle
	// controller marks it Ready=Unknown and taints it
	// node.kubernetes.io/unreachable (its default: 50 s). kwok then renews
	// its nodes' Leases every quarter of it (instead of every 10 s), the
	// controller looks every quarter of it, and it taints up to 10 nodes a
	// second (instead of one every 10 s). For the node-failure tests
	// (StopNodeHeartbeat); at least 4 s.
	NodeMonitorGracePeriod time.Duration
}

// ControlPlane is a running control plane. Safe for concurrent use.
type ControlPlane struct {
	dir        string
	pki        *pki
	host       string
	kubeconfig string
	gates      string // --feature-gates of every component
	// runtimeConfig is kube-apiserver's --runtime-config ("": none).
	runtimeConfig string

	mu    sync.Mutex
	procs []*process
}

// Start brings up the control plane and waits until it serves. On error
// everything started so far is stopped, and the error carries the tail of the
// failing component's log.
func Start(ctx context.Context, opts Options) (_ *ControlPlane, err error) {
	logger := klog.FromContext(ctx)
	root := opts.StateRoot
	if root == "" {
		root = filepath.Join(os.TempDir(), "gpufabric-framework")
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		return nil, fmt.Errorf("create state root: %w", err)
	}
	if stopped, err := cleanupStale(root); err != nil {
		logger.Error(err, "Cleaning up stale control planes")
	} else if len(stopped) > 0 {
		logger.Info("Stopped processes of a previous run whose owner died", "processes", stopped)
	}
	dir, err := os.MkdirTemp(root, "cp-")
	if err != nil {
		return nil, fmt.Errorf("create state dir: %w", err)
	}
	if opts.NodeMonitorGracePeriod > 0 && opts.NodeMonitorGracePeriod < minNodeMonitorGracePeriod {
		return nil, fmt.Errorf("node monitor grace period %s is under %s", opts.NodeMonitorGracePeriod, minNodeMonitorGracePeriod)
	}
	cp := &ControlPlane{dir: dir, gates: FeatureGates, runtimeConfig: RuntimeConfig}
	if opts.WithoutPodGroupAPI {
		cp.runtimeConfig = ""
	}
	if opts.CompositePodGroups {
		cp.gates += ",CompositePodGroup=true"
		cp.runtimeConfig += ",scheduling.k8s.io/v1alpha3=true"
	}
	if opts.ExtraFeatureGates != "" {
		cp.gates += "," + opts.ExtraFeatureGates
	}
	defer func() {
		if err != nil {
			cp.Stop()
		}
	}()
	if err := cp.initDir(); err != nil {
		return nil, err
	}
	etcdURL, err := cp.startEtcd(ctx)
	if err != nil {
		return nil, err
	}
	if err := cp.startAPIServer(ctx, etcdURL); err != nil {
		return nil, err
	}
	if err := cp.bootstrap(ctx, !opts.ControllerManager); err != nil {
		return nil, err
	}
	if opts.ControllerManager {
		if err := cp.startControllerManager(ctx, opts.ControllerManagerQPS, opts.NodeMonitorGracePeriod); err != nil {
			return nil, err
		}
	}
	if opts.Kwok {
		if err := cp.startKwok(ctx, opts.NodeMonitorGracePeriod); err != nil {
			return nil, err
		}
	}
	if opts.KubeScheduler {
		if err := cp.startKubeScheduler(ctx); err != nil {
			return nil, err
		}
	}
	logger.Info("Control plane ready", "host", cp.host, "kubeconfig", cp.kubeconfig)
	return cp, nil
}

func (cp *ControlPlane) initDir() error {
	rec, err := ownerRecord(os.Getpid())
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(cp.dir, "pids"), 0o700); err != nil {
		return fmt.Errorf("create pid dir: %w", err)
	}
	if err := os.WriteFile(filepath.Join(cp.dir, "owner"), []byte(rec), 0o600); err != nil {
		return fmt.Errorf("record owner: %w", err)
	}
	p, err := newPKI(filepath.Join(cp.dir, "pki"))
	if err != nil {
		return fmt.Errorf("create pki: %w", err)
	}
	cp.pki = p
	return nil
}

// Dir is the control plane's state dir (logs, certificates, kubeconfig).
func (cp *ControlPlane) Dir() string { return cp.dir }

// Host is the apiserver URL.
func (cp *ControlPlane) Host() string { return cp.host }

// KubeconfigPath is an admin kubeconfig for kubectl and other processes.
func (cp *ControlPlane) KubeconfigPath() string { return cp.kubeconfig }

// Stop stops every component (newest first) and removes the state dir.
// Idempotent.
func (cp *ControlPlane) Stop() {
	cp.stopProcesses()
	_ = os.RemoveAll(cp.dir)
}

func (cp *ControlPlane) stopProcesses() {
	cp.mu.Lock()
	procs := cp.procs
	cp.procs = nil
	cp.mu.Unlock()
	for i := len(procs) - 1; i >= 0; i-- {
		procs[i].stop(10 * time.Second)
	}
}

// maxLogLine bounds a line of LogTails (a CI log keeps only its tail: the
// failure should stay in it).
const maxLogLine = 300

// LogTails returns the last n lines of every component's log, for failures.
func (cp *ControlPlane) LogTails(n int) string {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	var b strings.Builder
	for _, p := range cp.procs {
		fmt.Fprintf(&b, "--- %s (%s) ---\n", p.name, p.logPath)
		for _, line := range strings.Split(p.logTail(n), "\n") {
			if len(line) > maxLogLine {
				line = line[:maxLogLine] + " …"
			}
			b.WriteString(line + "\n")
		}
	}
	return b.String()
}

// AdminConfig is a rest.Config for a cluster admin (system:masters).
func (cp *ControlPlane) AdminConfig() *rest.Config {
	return cp.configFor(cp.pki.adminCertFile(), cp.pki.adminKeyFile())
}

// UserConfig is a rest.Config authenticated as user in groups by a client
// certificate, so only the RBAC rules bound to that identity apply.
func (cp *ControlPlane) UserConfig(user string, groups ...string) (*rest.Config, error) {
	certPEM, keyPEM, err := cp.pki.ClientCert(user, groups...)
	if err != nil {
		return nil, fmt.Errorf("issue client certificate for %s: %w", user, err)
	}
	cfg := cp.configFor("", "")
	cfg.CertData, cfg.KeyData = certPEM, keyPEM
	return cfg, nil
}

func (cp *ControlPlane) configFor(certFile, keyFile string) *rest.Config {
	return &rest.Config{
		Host: cp.host,
		TLSClientConfig: rest.TLSClientConfig{
			CAData:   cp.pki.caPEM,
			CertFile: certFile,
			KeyFile:  keyFile,
		},
		QPS:   1000,
		Burst: 2000,
	}
}

func (cp *ControlPlane) start(name string, args []string, env ...string) (*process, error) {
	bin, err := binary(name)
	if err != nil {
		return nil, err
	}
	p, err := startProcess(cp.dir, name, bin, args, env)
	if err != nil {
		return nil, err
	}
	cp.mu.Lock()
	cp.procs = append(cp.procs, p)
	cp.mu.Unlock()
	return p, nil
}

// waitReady polls check until it succeeds, the process exits, or the timeout.
func waitReady(ctx context.Context, p *process, timeout time.Duration, check func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last error
	for {
		if done, werr := p.exited(); done {
			return fmt.Errorf("%s exited before it was ready (%v); log tail:\n%s", p.name, werr, p.logTail(40))
		}
		if last = check(ctx); last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s not ready after %s: %w; log tail:\n%s", p.name, timeout, last, p.logTail(40))
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// httpCheck returns a readiness check that GETs url and wants 200.
func httpCheck(client *http.Client, url string) func(context.Context) error {
	return func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET %s: %s", url, resp.Status)
		}
		return nil
	}
}

// freePorts returns n distinct free TCP ports on 127.0.0.1.
func freePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			_ = l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("find free port: %w", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// insecureClient is for health checks of components whose serving cert is
// self-signed (kube-controller-manager); it sends no credentials.
func insecureClient() *http.Client {
	return &http.Client{
		Timeout:   2 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}, //nolint:gosec // health probe only
	}
}

// StartProcess runs another program (a gpufabric binary) under this control
// plane: its output goes to <Dir>/<name>.log, its PID is recorded so that a
// later Start stops it if this process dies, and Stop ends it. Names must be
// unique within the control plane.
func (cp *ControlPlane) StartProcess(name, binaryPath string, args ...string) error {
	return cp.StartProcessEnv(name, binaryPath, nil, args...)
}

// Signal sends sig to the process group of the process started as name.
func (cp *ControlPlane) Signal(name string, sig syscall.Signal) error {
	p := cp.process(name)
	if p == nil {
		return fmt.Errorf("no process %s", name)
	}
	if err := syscall.Kill(-p.cmd.Process.Pid, sig); err != nil {
		return fmt.Errorf("signal %s: %w", name, err)
	}
	return nil
}

// Exited reports whether the process started as name has ended, and how.
func (cp *ControlPlane) Exited(name string) (bool, error) {
	p := cp.process(name)
	if p == nil {
		return false, fmt.Errorf("no process %s", name)
	}
	return p.exited()
}

func (cp *ControlPlane) process(name string) *process {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	for _, p := range cp.procs {
		if p.name == name {
			return p
		}
	}
	return nil
}

// ProcessLog is the log file of a process started by StartProcess.
func (cp *ControlPlane) ProcessLog(name string) string {
	return filepath.Join(cp.dir, name+".log")
}

// WriteUserKubeconfig writes a kubeconfig authenticating as user (client
// certificate, groups as organizations) into the state dir and returns its
// path. RBAC for the user is the caller's business.
func (cp *ControlPlane) WriteUserKubeconfig(user string, groups ...string) (string, error) {
	certPEM, keyPEM, err := cp.pki.ClientCert(user, groups...)
	if err != nil {
		return "", fmt.Errorf("issue client certificate for %s: %w", user, err)
	}
	dir := filepath.Join(cp.dir, "users", user)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("create user dir: %w", err)
	}
	certFile, keyFile := filepath.Join(dir, "client.crt"), filepath.Join(dir, "client.key")
	if err := writePair(certFile, certPEM, keyFile, keyPEM); err != nil {
		return "", err
	}
	path := filepath.Join(dir, "kubeconfig")
	return path, writeKubeconfigFor(path, cp.host, cp.pki.caFile(), certFile, keyFile)
}
