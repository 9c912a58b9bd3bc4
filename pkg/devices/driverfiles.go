package devices

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/nvidia-container-toolkit/pkg/nvcdi"
	transformroot "github.com/NVIDIA/nvidia-container-toolkit/pkg/nvcdi/transform/root"
	"github.com/go-logr/logr"
	"k8s.io/klog/v2"
	cdispec "tags.cncf.io/container-device-interface/specs-go"
)

// DriverFilesOptions say where the NVIDIA driver installation is.
type DriverFilesOptions struct {
	// DriverRoot is the root of the driver installation as this process
	// sees it ("/driver-root" in the plugin's container).
	DriverRoot string
	// HostDriverRoot is the same root as the container runtime on the host
	// sees it ("/" for a driver installed on the host); default DriverRoot.
	HostDriverRoot string
	// DevRoot is the directory whose dev/ holds the host's device nodes
	// as this process sees them ("/").
	DevRoot string
	// HookPath is the host path of nvidia-cdi-hook, which the runtime runs
	// to create the libraries' symlinks and update the container's ldcache.
	HookPath string
}

// DriverEdits returns what every GPU container needs from the driver
// installation, generated with NVIDIA's own nvcdi (nvidia-container-
// toolkit) from the node's NVML: the driver's libraries, binaries
// (nvidia-smi, …), GSP firmware and IPC sockets as read-only mounts, the
// nvidia-cdi-hook hooks (create-symlinks, update-ldcache,
// disable-device-node-modification), and the control device nodes.
// Mounts are rewritten from DriverRoot to HostDriverRoot. Per-GPU device
// nodes are not part of it: each device's resolver gives its own. An
// installation without libcuda is an error.
func DriverEdits(ctx context.Context, lib nvml.Interface, o DriverFilesOptions) (*cdispec.ContainerEdits, error) {
	if o.HostDriverRoot == "" {
		o.HostDriverRoot = o.DriverRoot
	}
	gen, err := nvcdi.New(
		nvcdi.WithNvmlLib(lib),
		nvcdi.WithMode(nvcdi.ModeNvml),
		nvcdi.WithDriverRoot(o.DriverRoot),
		nvcdi.WithDevRoot(o.DevRoot),
		nvcdi.WithNVIDIACDIHookPath(o.HookPath),
		nvcdi.WithLogger(nvcdiLogger{klog.FromContext(ctx).WithName("nvcdi")}),
		// nvsandboxutils would dlopen another driver library; NVML says
		// all nvcdi needs.
		nvcdi.WithFeatureFlags(nvcdi.FeatureDisableNvsandboxUtils),
	)
	if err != nil {
		return nil, fmt.Errorf("nvcdi: %w", err)
	}
	edits, err := gen.GetCommonEdits()
	if err != nil {
		return nil, fmt.Errorf("nvcdi driver files under %s: %w", o.DriverRoot, err)
	}
	spec := &cdispec.Spec{ContainerEdits: *edits.ContainerEdits}
	if filepath.Clean(o.DriverRoot) != filepath.Clean(o.HostDriverRoot) {
		t := transformroot.New(transformroot.WithRoot(o.DriverRoot), transformroot.WithTargetRoot(o.HostDriverRoot), transformroot.WithRelativeTo("host"))
		if err := t.Transform(spec); err != nil {
			return nil, fmt.Errorf("nvcdi: rewrite driver root: %w", err)
		}
	}
	return &spec.ContainerEdits, nil
}

// nvcdiLogger routes nvcdi's logging to the contextual logger: its info is
// our V(4), its debug and trace V(6).
type nvcdiLogger struct{ logr.Logger }

func (l nvcdiLogger) Debugf(f string, args ...any)   { l.V(6).Info(fmt.Sprintf(f, args...)) }
func (l nvcdiLogger) Tracef(f string, args ...any)   { l.V(6).Info(fmt.Sprintf(f, args...)) }
func (l nvcdiLogger) Info(args ...any)               { l.V(4).Info(fmt.Sprint(args...)) }
func (l nvcdiLogger) Infof(f string, args ...any)    { l.V(4).Info(fmt.Sprintf(f, args...)) }
func (l nvcdiLogger) Warning(args ...any)            { l.V(4).Info(fmt.Sprint(args...)) }
func (l nvcdiLogger) Warningf(f string, args ...any) { l.V(4).Info(fmt.Sprintf(f, args...)) }
func (l nvcdiLogger) Errorf(f string, args ...any)   { l.Error(nil, fmt.Sprintf(f, args...)) }
