package main

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"sigs.k8s.io/yaml"

	"github.com/gpufabric/gpufabric/pkg/devices"
	"github.com/gpufabric/gpufabric/pkg/devices/mock"
)

// discoverOptions are the flags of "kubelet-plugin discover".
type discoverOptions struct {
	backend    string
	mockFabric string
	mockDir    string
	node       string
	sysfsRoot  string
	devRoot    string
	procRoot   string
	imexCtl    []string
}

// runDiscover prints the node's ResourceSlices as a YAML stream. With
// --backend=mock (the default when --mock-fabric is given) the node comes
// from a fabric file and its fake sysfs is written to --mock-dir (a new
// temporary directory by default, kept so its paths stay valid). It stops
// with the context's error, printing nothing, once ctx is done (main
// cancels it on SIGINT/SIGTERM); discovery checks it before each device.
func runDiscover(ctx context.Context, args []string, stdout io.Writer) error {
	var o discoverOptions
	fs := newFlagSet("discover", os.Stderr)
	fs.StringVar(&o.backend, "backend", "", "hardware backend: nvml or mock (default: mock when --mock-fabric is set, else nvml)")
	fs.StringVar(&o.mockFabric, "mock-fabric", "", "fabric file describing the cluster (mock backend)")
	fs.StringVar(&o.mockDir, "mock-dir", "", "directory for the mock node's fake sysfs and /dev (default: a new temporary directory)")
	fs.StringVar(&o.node, "node", os.Getenv("NODE_NAME"), "node name (default $NODE_NAME)")
	fs.StringVar(&o.sysfsRoot, "sysfs-root", "/sys", "sysfs root (nvml backend)")
	fs.StringVar(&o.devRoot, "dev-root", "/dev", "host directory of device nodes (nvml backend)")
	fs.StringVar(&o.procRoot, "proc-root", "/proc", "procfs root (nvml backend)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if o.backend == "" {
		o.backend = "nvml"
		if o.mockFabric != "" {
			o.backend = "mock"
		}
	}
	if o.node == "" {
		return fmt.Errorf("%w: --node is required", errUsage)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("discover node %s: %w", o.node, context.Cause(ctx))
	}
	b, err := o.newBackend()
	if err != nil {
		return err
	}
	inv, err := devices.Discover(ctx, b, o.node)
	if err != nil {
		return fmt.Errorf("discover node %s: %w", o.node, err)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("discover node %s: %w", o.node, context.Cause(ctx))
	}
	return writeSlices(stdout, devices.ResourceSlices(o.node, inv.DriverResources()))
}

func (o discoverOptions) newBackend() (devices.Backend, error) {
	switch o.backend {
	case "nvml":
		if o.mockFabric != "" {
			return nil, fmt.Errorf("%w: --mock-fabric needs --backend=mock", errUsage)
		}
		return devices.NewNVMLBackend(nvml.New(), devices.NVMLOptions{
			SysfsRoot: o.sysfsRoot, DevRoot: o.devRoot, ProcRoot: o.procRoot,
			IMEXCtl: devices.IMEXCtl{Command: o.imexCtl},
		}), nil
	case "mock":
		if o.mockFabric == "" {
			return nil, fmt.Errorf("%w: --backend=mock needs --mock-fabric", errUsage)
		}
		fabric, err := mock.LoadFile(o.mockFabric)
		if err != nil {
			return nil, err
		}
		dir := o.mockDir
		if dir == "" {
			if dir, err = os.MkdirTemp("", "gpufabric-mock-"); err != nil {
				return nil, fmt.Errorf("create mock dir: %w", err)
			}
		}
		return fabric.Backend(o.node, dir)
	}
	return nil, fmt.Errorf("%w: --backend must be nvml or mock, got %q", errUsage, o.backend)
}

// refreshMock rebuilds the mock node's trees at --mock-dir from the fabric
// file as it is now (mock.Fabric.Refresh); a fabric file that does not
// load leaves the old trees in place.
func (o discoverOptions) refreshMock() (devices.Backend, error) {
	if o.mockFabric == "" || o.mockDir == "" {
		return nil, fmt.Errorf("%w: --backend=mock needs --mock-fabric and a mock dir", errUsage)
	}
	fabric, err := mock.LoadFile(o.mockFabric)
	if err != nil {
		return nil, err
	}
	return fabric.Refresh(o.node, o.mockDir)
}

// writeSlices writes objects as a YAML stream separated by "---".
func writeSlices[T any](w io.Writer, objs []T) error {
	for _, obj := range objs {
		data, err := yaml.Marshal(obj)
		if err != nil {
			return fmt.Errorf("marshal resource slice: %w", err)
		}
		if _, err := fmt.Fprintf(w, "---\n%s", data); err != nil {
			return fmt.Errorf("write output: %w", err)
		}
	}
	return nil
}
