package devices

import (
	"context"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// Backend is the hardware that discovery reads. The NVML backend
// (NewNVMLBackend) reads a real node; pkg/devices/mock builds one from a fabric
// file. Discover runs the same code on both.
type Backend interface {
	// NVML returns the NVML library. Discover calls Init and Shutdown on it.
	NVML() nvml.Interface
	// GPUFabricInfo returns a GPU's NVLink fabric registration. It returns
	// ERROR_NOT_SUPPORTED for a GPU without fabric support. It is separate
	// from NVML because nvml's GetGpuFabricInfoV cannot be mocked.
	GPUFabricInfo(dev nvml.Device) (FabricInfo, nvml.Return)
	// SysfsRoot is the directory that holds sysfs ("/sys" on a node).
	SysfsRoot() string
	// DevRoot is the host directory that holds device nodes ("/dev" on a
	// node). Device node paths in the Inventory start with it.
	DevRoot() string
	// DriverRoot is the root of the NVIDIA driver installation (libraries,
	// binaries, firmware) as this process sees it.
	DriverRoot() string
	// ProcRoot is the directory that holds procfs ("/proc" on a node):
	// devices and driver/nvidia/params tell the IMEX channels.
	ProcRoot() string
	// IMEXStatus asks the node's IMEX daemon for its status: IMEXReady
	// when it serves channels. An error means it could not be asked
	// (no daemon, no control command).
	IMEXStatus(ctx context.Context) (string, error)
}

// FabricInfo is a GPU's NVLink fabric registration, the fields common to
// GpuFabricInfo V1 and V3.
type FabricInfo struct {
	// ClusterUUID is all zero when the GPU is not part of a multi-node
	// NVLink fabric (or its registration has not completed).
	ClusterUUID [16]uint8
	CliqueID    uint32
	// State is one of nvml.GPU_FABRIC_STATE_*.
	State nvml.GpuFabricState
	// Status is the result of the registration; meaningful once State is
	// GPU_FABRIC_STATE_COMPLETED.
	Status nvml.Return
	// HealthSummary is one of nvml.GPU_FABRIC_HEALTH_SUMMARY_* (V3 only;
	// zero, "not supported", from V1).
	HealthSummary uint8
}

// FabricInfoFromV1 converts NVML's V1 fabric info.
func FabricInfoFromV1(info nvml.GpuFabricInfo) FabricInfo {
	return FabricInfo{
		ClusterUUID: info.ClusterUuid,
		CliqueID:    info.CliqueId,
		State:       nvml.GpuFabricState(info.State),
		Status:      nvml.Return(info.Status),
	}
}

// NVMLBackend reads a real node: NVML through go-nvml, sysfs and procfs
// under configurable roots, and the IMEX daemon through its control command.
type NVMLBackend struct {
	lib  nvml.Interface
	opts NVMLOptions
}

var _ Backend = (*NVMLBackend)(nil)

// NVMLOptions are where an NVMLBackend finds the node's files.
type NVMLOptions struct {
	// SysfsRoot, DevRoot, ProcRoot and DriverRoot default to "/sys",
	// "/dev", "/proc" and "/".
	SysfsRoot, DevRoot, ProcRoot, DriverRoot string
	// IMEXCtl asks the IMEX daemon for its status; without a command,
	// IMEXStatus fails.
	IMEXCtl IMEXCtl
}

// NewNVMLBackend returns a Backend over lib (usually nvml.New()).
func NewNVMLBackend(lib nvml.Interface, opts NVMLOptions) *NVMLBackend {
	for p, def := range map[*string]string{&opts.SysfsRoot: "/sys", &opts.DevRoot: "/dev", &opts.ProcRoot: "/proc", &opts.DriverRoot: "/"} {
		if *p == "" {
			*p = def
		}
	}
	return &NVMLBackend{lib: lib, opts: opts}
}

// NVML implements Backend.
func (b *NVMLBackend) NVML() nvml.Interface { return b.lib }

// SysfsRoot implements Backend.
func (b *NVMLBackend) SysfsRoot() string { return b.opts.SysfsRoot }

// DevRoot implements Backend.
func (b *NVMLBackend) DevRoot() string { return b.opts.DevRoot }

// ProcRoot implements Backend.
func (b *NVMLBackend) ProcRoot() string { return b.opts.ProcRoot }

// DriverRoot implements Backend.
func (b *NVMLBackend) DriverRoot() string { return b.opts.DriverRoot }

// IMEXStatus implements Backend with the configured control command.
func (b *NVMLBackend) IMEXStatus(ctx context.Context) (string, error) {
	return b.opts.IMEXCtl.Status(ctx)
}

// GPUFabricInfo implements Backend. Rule: use nvmlDeviceGetGpuFabricInfoV
// with the V3 struct when the library has it; fall back to the V1 call when
// the symbol is missing or the driver rejects the V3 version.
func (b *NVMLBackend) GPUFabricInfo(dev nvml.Device) (FabricInfo, nvml.Return) {
	if b.hasSymbol("nvmlDeviceGetGpuFabricInfoV") {
		info, ret := dev.GetGpuFabricInfoV().V3()
		switch ret {
		case nvml.SUCCESS:
			return FabricInfo{
				ClusterUUID:   info.ClusterUuid,
				CliqueID:      info.CliqueId,
				State:         nvml.GpuFabricState(info.State),
				Status:        nvml.Return(info.Status),
				HealthSummary: info.HealthSummary,
			}, nvml.SUCCESS
		case nvml.ERROR_ARGUMENT_VERSION_MISMATCH, nvml.ERROR_FUNCTION_NOT_FOUND:
			// Older driver: try V1 below.
		default:
			return FabricInfo{}, ret
		}
	}
	if !b.hasSymbol("nvmlDeviceGetGpuFabricInfo") {
		return FabricInfo{}, nvml.ERROR_NOT_SUPPORTED
	}
	info, ret := dev.GetGpuFabricInfo()
	if ret != nvml.SUCCESS {
		return FabricInfo{}, ret
	}
	return FabricInfoFromV1(info), nvml.SUCCESS
}

func (b *NVMLBackend) hasSymbol(name string) bool {
	return b.lib.Extensions().LookupSymbol(name) == nil
}
