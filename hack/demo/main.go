// Command demo is `make demo`: gpufabric's main job on an embedded local
// control plane. It starts etcd, kube-apiserver, kube-controller-manager and
// kwok (built from the Go module proxy), creates the mock GPU nodes of a
// fabric file, runs one kubelet-plugin process per node in mock mode and the
// scheduler, applies examples/*.yaml, and prints where everything went. When
// the JobSet and LeaderWorkerSet controllers are built
// (hack/build-workload-controllers.sh), it also runs them and
// gpufabric-grouper and submits a JobSet and a LeaderWorkerSet
// (examples/workloads) beside the Indexed Job.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"k8s.io/klog/v2"

	"github.com/gpufabric/gpufabric/pkg/devices/mock"
	"github.com/gpufabric/gpufabric/test/integration/framework"
)

type options struct {
	fabric   string
	examples string
	// workloads holds the JobSet and LeaderWorkerSet examples;
	// controllers is on, off or auto (when built).
	workloads   string
	controllers string
	binDir      string
	keep        bool
	timeout     time.Duration
}

func main() {
	var o options
	fs := flag.NewFlagSet("demo", flag.ExitOnError)
	fs.StringVar(&o.fabric, "fabric", envOr("FABRIC", "examples/fabric.yaml"), "fabric file describing the mock cluster (env FABRIC)")
	fs.StringVar(&o.examples, "examples", "examples", "directory of manifests to apply, in file-name order")
	fs.StringVar(&o.workloads, "workloads", "examples/workloads", "directory of the JobSet and LeaderWorkerSet examples")
	fs.StringVar(&o.controllers, "workload-controllers", envOr("WORKLOAD_CONTROLLERS", "auto"), "run the JobSet and LeaderWorkerSet controllers and gpufabric-grouper and submit a JobSet and a LeaderWorkerSet: on, off, or auto (when hack/build-workload-controllers.sh has built them; env WORKLOAD_CONTROLLERS)")
	fs.StringVar(&o.binDir, "bin-dir", "bin", "directory holding kubelet-plugin, scheduler and grouper")
	fs.BoolVar(&o.keep, "keep", os.Getenv("KEEP") != "", "keep the cluster running after the report until Ctrl-C (env KEEP=1)")
	fs.DurationVar(&o.timeout, "timeout", 3*time.Minute, "how long to wait for the jobs to settle")
	klog.InitFlags(fs)
	_ = fs.Set("v", "0")
	_ = fs.Parse(os.Args[1:])

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o, os.Stdout); err != nil {
		fmt.Fprintf(os.Stderr, "demo: %v\n", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, o options, out io.Writer) error {
	start := time.Now()
	// A bad fabric file fails here, with the discovery layer's error,
	// before anything is started.
	fabric, err := mock.LoadFile(o.fabric)
	if err != nil {
		return err
	}
	workloads, err := o.withWorkloads()
	if err != nil {
		return err
	}
	step(out, "Starting etcd, kube-apiserver, kube-controller-manager and kwok (first run builds them: ~12 min)")
	cp, err := framework.Start(ctx, framework.Options{ControllerManager: true, Kwok: true, CompositePodGroups: true})
	if err != nil {
		return fmt.Errorf("start control plane: %w", err)
	}
	defer cp.Stop()
	d, err := newDemo(ctx, cp, fabric, o)
	if err != nil {
		return err
	}
	if err := d.bringUp(ctx, out); err != nil {
		return d.withLogs(err)
	}
	if workloads {
		if err := d.startWorkloads(ctx, out); err != nil {
			return d.withLogs(err)
		}
	}
	step(out, "Applying %s/*.yaml", o.examples)
	if err := d.applyDir(ctx, o.examples); err != nil {
		return d.withLogs(err)
	}
	if err := d.waitSettled(ctx, o.timeout); err != nil {
		return d.withLogs(err)
	}
	if workloads {
		// After the main jobs settled: the segmented job needs a rack
		// whole, whatever order the others are placed in.
		d.workloads = true
		step(out, "Applying a JobSet and a LeaderWorkerSet (%s: %v)", o.workloads, workloadFiles)
		if err := d.applyWorkloads(ctx); err != nil {
			return d.withLogs(err)
		}
		if err := d.waitSettled(ctx, o.timeout); err != nil {
			return d.withLogs(err)
		}
	}
	if err := d.report(ctx, out); err != nil {
		return d.withLogs(err)
	}
	fmt.Fprintf(out, "\nDemo finished in %s.\n", time.Since(start).Round(time.Second))
	if !o.keep {
		return nil
	}
	fmt.Fprintf(out, "\nThe cluster keeps running. Try:\n  export KUBECONFIG=%s\n  kubectl get pods -n demo -o wide\nPress Ctrl-C to stop and clean up.\n", cp.KubeconfigPath())
	<-ctx.Done()
	return nil
}

func step(out io.Writer, format string, args ...any) {
	fmt.Fprintf(out, "==> "+format+"\n", args...)
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// binary returns the absolute path of a gpufabric binary built by make.
func (o options) binary(name string) (string, error) {
	p, err := filepath.Abs(filepath.Join(o.binDir, name))
	if err != nil {
		return "", err
	}
	if _, err := os.Stat(p); err != nil {
		return "", errors.Join(fmt.Errorf("%s not built (run make build)", p), err)
	}
	return p, nil
}
