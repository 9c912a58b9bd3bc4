package mock

import (
	"crypto/sha256"
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/gpus"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
	"github.com/google/uuid"

	"github.com/gpufabric/gpufabric/pkg/topology"
)

// newServer builds the node's mock NVML on the go-nvml DGX server of its
// model. Rule: the library's mocks leave PCI bus ids, NVLink and fabric
// calls unset; this sets exactly the calls discovery makes (every other call
// still panics) and derives UUIDs and bus ids from the node name and layout
// so results are deterministic.
func (n *node) newServer(lay layout, fabricPath string) *server.Server {
	s := n.model.newServer(gpus.Multiple(n.gpuCount, n.model.config)...)
	if n.driverVersion != "" {
		s.DriverVersion = n.driverVersion
	}
	for i, d := range s.Devices {
		dev := d.(*server.Device)
		dev.UUID = "GPU-" + n.gpuUUID(i)
		dev.PciBusID = lay.gpus[i].busID
		if n.faults.mig[i] {
			dev.MigMode = nvml.DEVICE_MIG_ENABLE
		}
		setMIG(dev)
		n.setPCI(dev)
		n.setNVLinks(i, dev)
		setNVLinkErrors(n, i, dev)
		n.setFabric(i, dev)
		if f, ok := n.faults.nvml[i]; ok {
			injectNVMLError(s, i, dev, f)
		}
	}
	setEvents(s, fabricPath, n.name, n.faults.events)
	failEventSets(s, n.faults.eventSetFailures)
	return s
}

// gpuUUID is a stable UUID for GPU i of the node.
func (n *node) gpuUUID(i int) string {
	sum := sha256.Sum256([]byte(fmt.Sprintf("%s/gpu/%d", n.name, i)))
	u, _ := uuid.FromBytes(sum[:16])
	return u.String()
}

func (n *node) setPCI(dev *server.Device) {
	var bus, device int
	fmt.Sscanf(dev.PciBusID, "0000:%x:%x.0", &bus, &device)
	// NVML prints an 8-digit domain in upper case; go-nvlib normalizes it.
	busID := fmt.Sprintf("00000000:%02X:%02X.0", bus, device)
	info := nvml.PciInfo{Domain: 0, Bus: uint32(bus), Device: uint32(device), PciDeviceId: dev.Config.PciDeviceId}
	for i := range min(len(busID), len(info.BusId)-1) {
		info.BusId[i] = int8(busID[i])
	}
	dev.GetPciInfoFunc = func() (nvml.PciInfo, nvml.Return) { return info, nvml.SUCCESS }
}

// setNVLinks: kind none has no NVLink (ERROR_NOT_SUPPORTED); otherwise the
// model's links exist, the first linksDown of them are down, and every link
// ends at an NVSwitch.
func (n *node) setNVLinks(i int, dev *server.Device) {
	links, down := n.model.nvlinks, n.faults.linksDown[i]
	noNVLink := n.kind == topology.DomainKindNone || links == 0
	dev.GetNvLinkStateFunc = func(link int) (nvml.EnableState, nvml.Return) {
		switch {
		case noNVLink:
			return nvml.FEATURE_DISABLED, nvml.ERROR_NOT_SUPPORTED
		case link < 0 || link >= links:
			return nvml.FEATURE_DISABLED, nvml.ERROR_INVALID_ARGUMENT
		case link < down:
			return nvml.FEATURE_DISABLED, nvml.SUCCESS
		}
		return nvml.FEATURE_ENABLED, nvml.SUCCESS
	}
	dev.GetNvLinkRemoteDeviceTypeFunc = func(link int) (nvml.IntNvLinkDeviceType, nvml.Return) {
		if noNVLink || link < 0 || link >= links {
			return nvml.NVLINK_DEVICE_TYPE_UNKNOWN, nvml.ERROR_INVALID_ARGUMENT
		}
		return nvml.NVLINK_DEVICE_TYPE_SWITCH, nvml.SUCCESS
	}
}

// setFabric: pre-Hopper GPUs and kind none answer ERROR_NOT_SUPPORTED;
// nvswitch nodes complete with a zero cluster UUID; mnnvl nodes complete
// with the file's cluster UUID and clique. A fabricNotCompleted fault
// reports its state with a zero cluster UUID.
func (n *node) setFabric(i int, dev *server.Device) {
	supported := n.model.fabricCapable() && n.kind != topology.DomainKindNone
	info := nvml.GpuFabricInfo{State: nvml.GPU_FABRIC_STATE_COMPLETED, Status: uint32(nvml.SUCCESS)}
	if n.kind == topology.DomainKindMNNVL {
		info.ClusterUuid, info.CliqueId = n.clusterUUID, n.cliqueID
	}
	if f, ok := n.faults.fabric[i]; ok {
		info = nvml.GpuFabricInfo{State: uint8(f.state), Status: uint32(f.status)}
	}
	dev.GetGpuFabricInfoFunc = func() (nvml.GpuFabricInfo, nvml.Return) {
		if !supported {
			return nvml.GpuFabricInfo{}, nvml.ERROR_NOT_SUPPORTED
		}
		return info, nvml.SUCCESS
	}
}

// injectNVMLError makes one call of GPU i fail.
func injectNVMLError(s *server.Server, i int, dev *server.Device, f nvmlFault) {
	ret := f.ret
	switch f.call {
	case CallGetHandle:
		orig := s.DeviceGetHandleByIndexFunc
		s.DeviceGetHandleByIndexFunc = func(index int) (nvml.Device, nvml.Return) {
			if index == i {
				return nil, ret
			}
			return orig(index)
		}
	case CallGetUUID:
		dev.GetUUIDFunc = func() (string, nvml.Return) { return "", ret }
	case CallGetMinorNumber:
		dev.GetMinorNumberFunc = func() (int, nvml.Return) { return 0, ret }
	case CallGetName:
		dev.GetNameFunc = func() (string, nvml.Return) { return "", ret }
	case CallGetMemoryInfo:
		dev.GetMemoryInfoFunc = func() (nvml.Memory, nvml.Return) { return nvml.Memory{}, ret }
	case CallGetPciInfo:
		dev.GetPciInfoFunc = func() (nvml.PciInfo, nvml.Return) { return nvml.PciInfo{}, ret }
	case CallGetArchitecture:
		dev.GetArchitectureFunc = func() (nvml.DeviceArchitecture, nvml.Return) { return 0, ret }
	case CallGetCudaComputeCapability:
		dev.GetCudaComputeCapabilityFunc = func() (int, int, nvml.Return) { return 0, 0, ret }
	case CallGetMigMode:
		dev.GetMigModeFunc = func() (int, int, nvml.Return) { return 0, 0, ret }
	case CallGetNvLinkState:
		dev.GetNvLinkStateFunc = func(int) (nvml.EnableState, nvml.Return) { return 0, ret }
	case CallGetGpuFabricInfo:
		dev.GetGpuFabricInfoFunc = func() (nvml.GpuFabricInfo, nvml.Return) { return nvml.GpuFabricInfo{}, ret }
	}
}
