package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"

	"k8s.io/klog/v2"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/gpufabric/gpufabric/pkg/devices"
)

// cdiOptions say what a GPU's CDI spec carries besides its device nodes.
type cdiOptions struct {
	// driver is "nvcdi" (the driver's libraries, binaries and hooks,
	// generated with NVIDIA's nvcdi: pods run under any CDI runtime) or
	// "off" (device nodes and variables only, for nvidia-container-runtime).
	driver         string
	driverRoot     string
	hostDriverRoot string
	hookPath       string
	hookSource     string
}

// driverFiles generates the driver installation's CDI edits once per
// driver version (the inventory's) and hands out the cached value. Safe for
// concurrent use; a failed generation is retried at the next call.
type driverFiles struct {
	opts    devices.DriverFilesOptions
	backend devices.Backend
	version func() string

	mu        sync.Mutex
	edits     *cdispec.ContainerEdits
	forDriver string
}

// newDriverFiles returns nil with --cdi-driver=off. The mock backend's
// fake driver installation replaces the driver roots.
func (o *runOptions) newDriverFiles(b devices.Backend, version func() string) *driverFiles {
	if o.cdi.driver == "off" {
		return nil
	}
	opts := devices.DriverFilesOptions{
		DriverRoot: o.cdi.driverRoot, HostDriverRoot: o.cdi.hostDriverRoot,
		DevRoot: filepath.Dir(b.DevRoot()), HookPath: o.cdi.hookPath,
	}
	if o.backend == "mock" {
		opts.DriverRoot, opts.HostDriverRoot = b.DriverRoot(), b.DriverRoot()
	}
	return &driverFiles{opts: opts, backend: b, version: version}
}

// get implements node.Config.DriverEdits.
func (f *driverFiles) get(ctx context.Context) (*cdispec.ContainerEdits, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	v := f.version()
	if f.edits != nil && f.forDriver == v {
		return f.edits, nil
	}
	edits, err := devices.DriverEdits(ctx, f.backend.NVML(), f.opts)
	if err != nil {
		return nil, err
	}
	klog.FromContext(ctx).Info("Generated the driver's CDI edits", "driverVersion", v,
		"mounts", len(edits.Mounts), "hooks", len(edits.Hooks), "driverRoot", f.opts.DriverRoot)
	f.edits, f.forDriver = edits, v
	return edits, nil
}

// installHook copies the nvidia-cdi-hook shipped in the plugin's image to
// the host path the CDI specs name (a host directory mounted at the same
// path), so that nodes need no NVIDIA Container Toolkit. The copy replaces
// the old one atomically: a container starting meanwhile runs either.
func installHook(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("install nvidia-cdi-hook: %w", err)
	}
	defer func() { _ = in.Close() }()
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return fmt.Errorf("install nvidia-cdi-hook: %w", err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(dst), ".nvidia-cdi-hook-*")
	if err != nil {
		return fmt.Errorf("install nvidia-cdi-hook: %w", err)
	}
	defer func() { _ = os.Remove(tmp.Name()) }()
	_, err = io.Copy(tmp, in)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(tmp.Name(), 0o755)
	}
	if err == nil {
		err = os.Rename(tmp.Name(), dst)
	}
	if err != nil {
		return fmt.Errorf("install nvidia-cdi-hook to %s: %w", dst, err)
	}
	return nil
}
