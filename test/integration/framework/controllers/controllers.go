package controllers

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"

	"github.com/gpufabric/gpufabric/test/integration/framework"
)

// BinDirEnv names the folder holding the controllers' binaries and
// manifests (what hack/build-workload-controllers.sh prints). When it is
// unset, Start runs that script, which builds them from the Go module proxy
// once and caches them.
const BinDirEnv = "GPUFABRIC_WORKLOAD_CONTROLLERS_BIN"

// Controller is a workload controller Start can run; its value is its
// process name (its log is <state dir>/<value>.log).
type Controller string

// The controllers, with the versions hack/build-workload-controllers.sh
// builds.
const (
	// JobSet is the JobSet controller (sigs.k8s.io/jobset v0.12.0).
	JobSet Controller = "jobset"
	// LWS is the LeaderWorkerSet controller (sigs.k8s.io/lws v0.9.0).
	LWS Controller = "lws"
	// Trainer is the Kubeflow Trainer v2 controller manager
	// (github.com/kubeflow/trainer/v2 v2.3.0); it runs on JobSet.
	Trainer Controller = "trainer"
	// KubeRay is the KubeRay operator
	// (github.com/ray-project/kuberay/ray-operator v1.6.0).
	KubeRay Controller = "kuberay"
)

// readyTimeout bounds each controller's start (CRDs, process, webhooks).
const readyTimeout = 90 * time.Second

// Start runs the controllers under cp (once per control plane: their CRDs
// and webhook configurations are cluster-wide) and returns when all are
// ready. The CRDs of all come first (Trainer watches JobSets from its start, so it
// needs JobSet); the controllers then start side by side.
func Start(ctx context.Context, cp *framework.ControlPlane, which ...Controller) error {
	start := time.Now()
	specs, err := specsFor(which)
	if err != nil {
		return err
	}
	assets, err := binDir(which)
	if err != nil {
		return err
	}
	admin, err := kubernetes.NewForConfig(cp.AdminConfig())
	if err != nil {
		return fmt.Errorf("build admin client: %w", err)
	}
	dyn, err := dynamic.NewForConfig(cp.AdminConfig())
	if err != nil {
		return fmt.Errorf("build dynamic client: %w", err)
	}
	var files []string
	for _, s := range specs {
		files = append(files, filepath.Join(assets, string(s.name)+"-crds.yaml"))
	}
	crds, err := installCRDs(ctx, dyn, files...)
	if err != nil {
		return err
	}
	if err := waitEstablished(ctx, dyn, crds, readyTimeout); err != nil {
		return err
	}
	logger := klog.FromContext(ctx)
	logger.V(2).Info("Workload controllers' CRDs established", "crds", len(crds), "took", time.Since(start))
	errs := make([]error, len(specs))
	var wg sync.WaitGroup
	for i, s := range specs {
		wg.Go(func() { errs[i] = startOne(ctx, cp, admin, assets, s) })
	}
	wg.Wait()
	logger.V(2).Info("Workload controllers started", "took", time.Since(start))
	return errors.Join(errs...)
}

// StartT is Start for a test: it fails the test if a controller does not
// start (framework.StartT then dumps every component's log).
func StartT(t testing.TB, cp *framework.ControlPlane, which ...Controller) {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	if err := Start(ctx, cp, which...); err != nil {
		t.Fatalf("start workload controllers: %v", err)
	}
}

// startOne serves one controller's webhooks and runs it until ready.
func startOne(ctx context.Context, cp *framework.ControlPlane, admin kubernetes.Interface, assets string, s spec) error {
	ports, err := framework.FreePorts(3)
	if err != nil {
		return err
	}
	r := run{
		dir: filepath.Join(cp.Dir(), string(s.name)), kubeconfig: cp.KubeconfigPath(),
		webhookPort: ports[0], healthPort: ports[1], metricsPort: ports[2],
	}
	r.certDir = s.certDir(r.dir)
	webhookAddr := fmt.Sprintf("127.0.0.1:%d", r.webhookPort)
	var served func(context.Context) error
	if s.webhooks {
		caPEM, err := cp.IssueServingCert(r.certDir)
		if err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
		urls, err := installWebhooks(ctx, admin, assets, s, "https://"+webhookAddr, caPEM)
		if err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
		if served, err = webhooksServed(urls, caPEM); err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
	}
	args, env, err := s.command(r)
	if err != nil {
		return fmt.Errorf("%s: %w", s.name, err)
	}
	if err := cp.StartProcessEnv(string(s.name), filepath.Join(assets, string(s.name)), env, args...); err != nil {
		return err
	}
	url := fmt.Sprintf("http://127.0.0.1:%d/readyz", r.healthPort)
	if err := cp.WaitHTTPReady(ctx, string(s.name), url, readyTimeout); err != nil {
		return err
	}
	if served != nil {
		if err := cp.WaitProcessReady(ctx, string(s.name), readyTimeout, served); err != nil {
			return err
		}
	}
	logger := klog.FromContext(ctx)
	if s.webhooks {
		logger = logger.WithValues("webhook", webhookAddr)
	}
	logger.Info("Workload controller ready", "controller", s.name, "log", cp.ProcessLog(string(s.name)))
	return nil
}

// specsFor returns the specs of the named controllers, refusing unknown or
// repeated names and Trainer without JobSet.
func specsFor(which []Controller) ([]spec, error) {
	if len(which) == 0 {
		return nil, errors.New("no workload controller named")
	}
	var out []spec
	for i, c := range which {
		if slices.Contains(which[:i], c) {
			return nil, fmt.Errorf("workload controller %q named twice", c)
		}
		s, ok := specOf(c)
		if !ok {
			return nil, fmt.Errorf("unknown workload controller %q", c)
		}
		out = append(out, s)
	}
	if slices.Contains(which, Trainer) && !slices.Contains(which, JobSet) {
		return nil, errors.New("trainer runs on JobSet: start JobSet with it")
	}
	return out, nil
}

// binDir returns the folder with the controllers' binaries and manifests,
// building the named ones if needed.
func binDir(which []Controller) (string, error) {
	if dir := os.Getenv(BinDirEnv); dir != "" {
		return filepath.Abs(dir)
	}
	root, err := framework.RepoRoot()
	if err != nil {
		return "", err
	}
	args := make([]string, len(which))
	for i, c := range which {
		args[i] = string(c)
	}
	cmd := exec.Command(filepath.Join(root, "hack", "build-workload-controllers.sh"), args...)
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = os.Stderr // progress of a cold build
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("build workload controllers (hack/build-workload-controllers.sh): %w", err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	return lines[len(lines)-1], nil
}
