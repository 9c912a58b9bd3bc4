package devices

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/klog/v2"

	"github.com/gpufabric/gpufabric/pkg/topology"
)

// NoRail is the Rail of a GPU that has no HCA on its node.
const NoRail = -1

// Inventory is what discovery found on one node: the devices to publish and,
// per device, what a CDI spec needs (host paths of device nodes, UUIDs, IB
// device names).
type Inventory struct {
	NodeName string
	// DriverVersion is the NVIDIA driver version as NVML reports it.
	DriverVersion string
	// GPUs are sorted by minor number, NICs by IB device name.
	GPUs []GPU
	NICs []NIC
	// IMEX is what the driver offers for IMEX channels.
	IMEX IMEXInfo
	// Rails is the rail map to remember for the next discovery (see
	// WithRailMap).
	Rails *RailMap
	// MIGMode is how MIG-enabled GPUs are published.
	MIGMode MIGMode
}

// Option changes how Discover reads a node.
type Option func(*options)

type options struct {
	rails *RailMap
	mig   MIGMode
}

// WithRailMap numbers rails with the map a previous discovery returned in
// Inventory.Rails (see numberRails), so that a missing HCA does not shift
// the rails after it. nil is positional numbering.
func WithRailMap(m *RailMap) Option {
	return func(o *options) { o.rails = m }
}

// GPU is one full GPU.
type GPU struct {
	// Name is the published device name, gpu-<minor>.
	Name  string
	Minor int
	Index int
	UUID  string
	// ProductName, Architecture and CUDAComputeCapability ("9.0") are empty
	// when NVML failed to report them (the GPU is then tainted).
	ProductName           string
	Architecture          string
	CUDAComputeCapability string
	MemoryBytes           uint64
	MIGEnabled            bool
	// MIG are the partitions of a MIG-enabled GPU (MIGPartitions mode);
	// MIGError says why they could not be read.
	MIG      []MIGPartition
	MIGError string
	// PCI is empty when the GPU's PCI address is unknown.
	PCI PCIInfo
	// NVLink is the GPU's NVLink domain.
	NVLink NVLinkInfo
	// IBRail and IBDevice name the nearest HCA (NoRail and "" without one).
	IBRail   int
	IBDevice string
	// DeviceNodes are host paths: /dev/nvidia<minor> followed by the
	// control nodes (nvidiactl, nvidia-uvm, nvidia-uvm-tools).
	DeviceNodes []string
	// Taints say what is wrong with the GPU; empty when healthy.
	Taints []resourceapi.DeviceTaint
	// FabricErrors, when set, is published as the fabricErrors attribute:
	// link errors counted in the plugin's window (discovery leaves it nil).
	FabricErrors *int64
}

// NIC is one RDMA device (an HCA port) from /sys/class/infiniband.
type NIC struct {
	// Name is the published device name, nic-<ibdev>.
	Name string
	// IBDevice is the kernel's RDMA device name, e.g. mlx5_3.
	IBDevice string
	Rail     int
	Port     int
	// PortState and PhysState are the names from sysfs ("ACTIVE",
	// "LinkUp"); LinkLayer is "InfiniBand" or "Ethernet".
	PortState string
	PhysState string
	LinkLayer string
	// RateGbps is zero when sysfs did not say.
	RateGbps int
	NodeGUID string
	// PortGUID is the published port's GUID (the low half of its GID 0),
	// the node GUID when that is unreadable; "" when neither is valid.
	PortGUID string
	PCI      PCIInfo
	// PCIClass is the device's PCI class (0x020700 for IB-mode, 0x020000
	// for Ethernet-mode ConnectX).
	PCIClass string
	// DeviceNodes are host paths: /dev/infiniband/uverbsN (when sysfs names
	// one) and /dev/infiniband/rdma_cm.
	DeviceNodes []string
	Taints      []resourceapi.DeviceTaint
	// FabricErrors: as GPU.FabricErrors.
	FabricErrors *int64
}

// PCIInfo is where a device sits on the PCI tree.
type PCIInfo struct {
	// BusID is the extended BDF, "0000:1b:00.0"; empty when unknown.
	BusID string
	// Path is the device's directory relative to the sysfs root,
	// "devices/pci0000:00/.../0000:1b:00.0"; empty when unresolved.
	Path string
	// Root is the PCIe root complex, "pci0000:00"; empty when unresolved.
	Root string
	// NUMANode is nil when the device has no NUMA affinity or sysfs did not
	// say.
	NUMANode *int
}

// NVLinkInfo is a GPU's NVLink domain.
type NVLinkInfo struct {
	// Domain is the published nvlinkDomain (topology.MNNVLDomainID or
	// topology.NodeDomainID).
	Domain string
	Kind   topology.DomainKind
	// ClusterUUID and CliqueID are set for multi-node NVLink.
	ClusterUUID string
	CliqueID    uint32
	// ActiveLinks out of TotalLinks NVLinks are up.
	ActiveLinks int
	TotalLinks  int
}

// Discover reads the node's GPUs and HCAs from b and returns its inventory.
// Rules: only a failure to use NVML at all (Init, device count) or to read
// the driver version fails the call. A GPU whose handle, minor number or
// UUID cannot be read is skipped; any other NVML error taints the GPU. A bad
// HCA is skipped or tainted (see discoverNICs). Both are logged with the
// reason. Discover stops with ctx's error (wrapped) when ctx is done: it
// checks before it starts and before each GPU and HCA.
func Discover(ctx context.Context, b Backend, nodeName string, opts ...Option) (*Inventory, error) {
	o := options{mig: MIGPartitions}
	for _, opt := range opts {
		opt(&o)
	}
	logger := klog.FromContext(ctx).WithValues("node", klog.KRef("", nodeName))
	ctx = klog.NewContext(ctx, logger)
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("discover: %w", context.Cause(ctx))
	}
	lib := b.NVML()
	if ret := lib.Init(); ret != nvml.SUCCESS {
		return nil, fmt.Errorf("init nvml: %w", ret)
	}
	defer func() {
		if ret := lib.Shutdown(); ret != nvml.SUCCESS {
			logger.Error(ret, "Shutting down NVML failed")
		}
	}()
	driver, ret := lib.SystemGetDriverVersion()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("get driver version: %w", ret)
	}
	gpus, err := discoverGPUs(ctx, b, nodeName, o.mig)
	if err != nil {
		return nil, err
	}
	nics, rails, err := discoverNICs(ctx, b.SysfsRoot(), b.DevRoot(), o.rails, gpuPCIPaths(gpus))
	if err != nil {
		return nil, err
	}
	assignRails(ctx, gpus, nics)
	inv := &Inventory{NodeName: nodeName, DriverVersion: driver, GPUs: gpus, NICs: nics, IMEX: readIMEX(ctx, b.ProcRoot()), Rails: rails, MIGMode: o.mig}
	logger.V(2).Info("Discovered devices", "gpus", len(gpus), "nics", len(nics))
	return inv, nil
}

// gpuPCIPaths are the GPUs' PCI paths in PCI bus id order ("" where a
// GPU's path is unknown: it pairs with no HCA but keeps its index).
func gpuPCIPaths(gpus []GPU) []string {
	sorted := slices.Clone(gpus)
	slices.SortFunc(sorted, func(a, b GPU) int { return strings.Compare(a.PCI.BusID, b.PCI.BusID) })
	paths := make([]string, len(sorted))
	for i, g := range sorted {
		paths[i] = g.PCI.Path
	}
	return paths
}

// ControlDeviceNodes are the NVIDIA control device nodes every GPU user
// needs, as host paths under devRoot.
func ControlDeviceNodes(devRoot string) []string {
	return []string{
		devRoot + "/nvidiactl",
		devRoot + "/nvidia-uvm",
		devRoot + "/nvidia-uvm-tools",
	}
}

// GPUByUUID returns the GPU with the given UUID.
func (inv *Inventory) GPUByUUID(uuid string) (GPU, bool) {
	for _, g := range inv.GPUs {
		if g.UUID == uuid {
			return g, true
		}
	}
	return GPU{}, false
}

// Device returns the GPU or NIC published under a device name (exactly one
// of the results is non-nil, or both are nil).
func (inv *Inventory) Device(name string) (*GPU, *NIC) {
	for i := range inv.GPUs {
		if inv.GPUs[i].Name == name {
			return &inv.GPUs[i], nil
		}
	}
	for i := range inv.NICs {
		if inv.NICs[i].Name == name {
			return nil, &inv.NICs[i]
		}
	}
	return nil, nil
}

// MIGPartition returns the GPU and partition published under a device
// name.
func (inv *Inventory) MIGPartition(name string) (*GPU, *MIGPartition) {
	for i := range inv.GPUs {
		g := &inv.GPUs[i]
		for j := range g.MIG {
			if g.MIG[j].Name == name {
				return g, &g.MIG[j]
			}
		}
	}
	return nil, nil
}

// MIGExcluded lists the MIG-enabled GPUs that are not published: all of
// them with MIGExclude, else those whose partitions could not be read
// (GPU.MIGError says why).
func (inv *Inventory) MIGExcluded() []GPU {
	var out []GPU
	for _, g := range inv.GPUs {
		if g.MIGEnabled && (inv.MIGMode == MIGExclude || len(g.MIG) == 0) {
			out = append(out, g)
		}
	}
	return out
}
