package devices

import (
	"context"
	"fmt"
	"slices"
	"strings"

	nvdev "github.com/NVIDIA/go-nvlib/pkg/nvlib/device"
	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/go-logr/logr"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/klog/v2"

	"github.com/gpufabric/gpufabric/pkg/topology"
)

// discoverGPUs reads every GPU NVML reports. Rules: a GPU whose handle,
// minor number or UUID cannot be read is skipped (it cannot be named or
// prepared); every other per-GPU NVML error taints that GPU with
// TaintNVMLError. The result is sorted by minor number.
func discoverGPUs(ctx context.Context, b Backend, nodeName string, mig MIGMode) ([]GPU, error) {
	lib := b.NVML()
	count, ret := lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("get gpu count: %w", ret)
	}
	devlib := nvdev.New(lib)
	gpus := make([]GPU, 0, count)
	for i := range count {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("discover gpus: %w", context.Cause(ctx))
		}
		if g, ok := discoverGPU(ctx, b, devlib, i, nodeName, mig); ok {
			gpus = append(gpus, g)
		}
	}
	slices.SortFunc(gpus, func(a, b GPU) int { return a.Minor - b.Minor })
	return gpus, nil
}

// nvmlFaults collects a GPU's NVML errors: each one is logged, the first
// one becomes the value of the GPU's TaintNVMLError taint ("<call>
// <reason>", e.g. GetMemoryInfo-ERROR_UNKNOWN).
type nvmlFaults struct {
	logger logr.Logger
	first  string
}

func (f *nvmlFaults) record(call string, err error) {
	f.logger.Error(err, "NVML call failed, tainting GPU", "call", call)
	if f.first == "" {
		// Keep the NVML reason, not the wrappers' prefixes:
		// "error getting device architecture: ERROR_GPU_IS_LOST".
		reason := err.Error()
		if i := strings.LastIndex(reason, ": "); i >= 0 {
			reason = reason[i+2:]
		}
		f.first = call + " " + reason
	}
}

func (f *nvmlFaults) taints() []resourceapi.DeviceTaint {
	if f.first == "" {
		return nil
	}
	return []resourceapi.DeviceTaint{newTaint(topology.TaintNVMLError, f.first)}
}

func discoverGPU(ctx context.Context, b Backend, devlib nvdev.Interface, index int, nodeName string, mig MIGMode) (GPU, bool) {
	logger := klog.FromContext(ctx).WithValues("gpuIndex", index)
	h, ret := b.NVML().DeviceGetHandleByIndex(index)
	if ret != nvml.SUCCESS {
		logger.Error(ret, "Skipping GPU: no NVML handle")
		return GPU{}, false
	}
	dev, err := devlib.NewDevice(h)
	if err != nil {
		logger.Error(err, "Skipping GPU: wrapping NVML handle failed")
		return GPU{}, false
	}
	minor, ret := dev.GetMinorNumber()
	if ret != nvml.SUCCESS {
		logger.Error(ret, "Skipping GPU: no minor number")
		return GPU{}, false
	}
	uuid, ret := dev.GetUUID()
	if ret != nvml.SUCCESS {
		logger.Error(ret, "Skipping GPU: no UUID", "minor", minor)
		return GPU{}, false
	}
	logger = logger.WithValues("minor", minor, "uuid", uuid)
	g := GPU{
		Name:        topology.GPUDeviceName(minor),
		Minor:       minor,
		Index:       index,
		UUID:        uuid,
		IBRail:      NoRail,
		DeviceNodes: append([]string{fmt.Sprintf("%s/nvidia%d", b.DevRoot(), minor)}, ControlDeviceNodes(b.DevRoot())...),
	}
	faults := &nvmlFaults{logger: logger}
	readIdentity(dev, &g, faults)
	if busID, err := dev.GetPCIBusID(); err != nil {
		faults.record("GetPciInfo", err)
	} else if err := validBusID(busID); err != nil {
		faults.record("GetPciInfo", err)
	} else {
		g.PCI = readPCIInfo(klog.NewContext(ctx, logger), b.SysfsRoot(), busID)
	}
	if g.MIGEnabled && mig == MIGPartitions {
		var err error
		if g.MIG, err = readMIGPartitions(devlib, dev, minor); err != nil {
			logger.Error(err, "MIG partitions unreadable; the GPU is not published")
			g.MIG, g.MIGError = nil, err.Error()
		}
	}
	var linkTaints []resourceapi.DeviceTaint
	g.NVLink, linkTaints = readNVLinkDomain(b, dev, nodeName, faults)
	g.Taints = append(faults.taints(), linkTaints...)
	return g, true
}

// readIdentity fills what NVML says about the GPU itself; failures go to
// faults and leave the field empty.
func readIdentity(dev nvdev.Device, g *GPU, faults *nvmlFaults) {
	var ret nvml.Return
	var err error
	if g.ProductName, ret = dev.GetName(); ret != nvml.SUCCESS {
		faults.record("GetName", ret)
	}
	if g.Architecture, err = dev.GetArchitectureAsString(); err != nil {
		faults.record("GetArchitecture", err)
	}
	if g.CUDAComputeCapability, err = dev.GetCudaComputeCapabilityAsString(); err != nil {
		faults.record("GetCudaComputeCapability", err)
		g.CUDAComputeCapability = ""
	}
	if mem, ret := dev.GetMemoryInfo(); ret != nvml.SUCCESS {
		faults.record("GetMemoryInfo", ret)
	} else {
		g.MemoryBytes = mem.Total
	}
	if g.MIGEnabled, err = dev.IsMigEnabled(); err != nil {
		faults.record("GetMigMode", err)
	}
}
