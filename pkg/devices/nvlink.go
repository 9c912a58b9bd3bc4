package devices

import (
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	resourceapi "k8s.io/api/resource/v1"

	"github.com/gpufabric/gpufabric/pkg/topology"
)

// linkState summarizes a GPU's NVLinks.
type linkState struct {
	active, total int
	// toSwitch is true when an active link ends at an NVSwitch.
	toSwitch bool
}

// readNVLinks walks links 0..NVLINK_MAX_LINKS-1. Rules: a link that answers
// ERROR_NOT_SUPPORTED or ERROR_INVALID_ARGUMENT does not exist; a link
// exists and is down when its state is FEATURE_DISABLED. The remote device
// type is read for active links until one ends at a switch; a failure to
// read it counts as "not a switch".
func readNVLinks(dev nvml.Device) (linkState, error) {
	var s linkState
	for link := range nvml.NVLINK_MAX_LINKS {
		state, ret := dev.GetNvLinkState(link)
		switch ret {
		case nvml.SUCCESS:
		case nvml.ERROR_NOT_SUPPORTED, nvml.ERROR_INVALID_ARGUMENT:
			continue
		default:
			return s, fmt.Errorf("link %d: %w", link, ret)
		}
		s.total++
		if state != nvml.FEATURE_ENABLED {
			continue
		}
		s.active++
		if !s.toSwitch {
			remote, ret := dev.GetNvLinkRemoteDeviceType(link)
			s.toSwitch = ret == nvml.SUCCESS && remote == nvml.NVLINK_DEVICE_TYPE_SWITCH
		}
	}
	return s, nil
}

// readNVLinkDomain decides a GPU's NVLink domain and its fabric taints.
//
// Domain rules, first match wins:
//   - fabric info with a non-zero cluster UUID: kind mnnvl, domain
//     topology.MNNVLDomainID(clusterUUID, cliqueID);
//   - an active NVLink to an NVSwitch, or a fabric registration at all
//     (only NVSwitch-attached GPUs register with the fabric manager): kind
//     nvswitch, a node-scoped domain;
//   - otherwise: kind none, a node-scoped domain.
//
// Taint rules (effect NoSchedule):
//   - TaintFabricNotCompleted when the GPU supports fabric registration and
//     its state is not COMPLETED, or it completed with an error status;
//   - TaintNVLinkDegraded when some NVLinks are down, or the V3 fabric
//     health summary is unhealthy or limited.
//
// NVML errors go to faults (TaintNVMLError).
func readNVLinkDomain(b Backend, dev nvml.Device, nodeName string, faults *nvmlFaults) (NVLinkInfo, []resourceapi.DeviceTaint) {
	var info NVLinkInfo
	var taints []resourceapi.DeviceTaint
	links, err := readNVLinks(dev)
	if err != nil {
		faults.record("GetNvLinkState", err)
	}
	info.ActiveLinks, info.TotalLinks = links.active, links.total
	fabric, ret := b.GPUFabricInfo(dev)
	switch {
	case ret == nvml.ERROR_NOT_SUPPORTED:
		fabric = FabricInfo{}
	case ret != nvml.SUCCESS:
		faults.record("GetGpuFabricInfo", ret)
		fabric = FabricInfo{}
	}
	if t, ok := fabricTaint(fabric); ok {
		taints = append(taints, t)
	}
	if t, ok := degradedTaint(links, fabric); ok {
		taints = append(taints, t)
	}
	switch {
	case fabric.ClusterUUID != [16]uint8{}:
		info.Kind = topology.DomainKindMNNVL
		info.ClusterUUID = formatUUID(fabric.ClusterUUID)
		info.CliqueID = fabric.CliqueID
		info.Domain = topology.MNNVLDomainID(info.ClusterUUID, info.CliqueID)
	case links.toSwitch || fabric.State != nvml.GPU_FABRIC_STATE_NOT_SUPPORTED:
		info.Kind = topology.DomainKindNVSwitch
		info.Domain = topology.NodeDomainID(info.Kind, nodeName)
	default:
		info.Kind = topology.DomainKindNone
		info.Domain = topology.NodeDomainID(info.Kind, nodeName)
	}
	return info, taints
}

func fabricTaint(f FabricInfo) (resourceapi.DeviceTaint, bool) {
	switch {
	case f.State == nvml.GPU_FABRIC_STATE_NOT_SUPPORTED:
		return resourceapi.DeviceTaint{}, false
	case f.State != nvml.GPU_FABRIC_STATE_COMPLETED:
		return newTaint(topology.TaintFabricNotCompleted, "registration "+fabricStateName(f.State)), true
	case f.Status != nvml.SUCCESS:
		return newTaint(topology.TaintFabricNotCompleted, "completed with "+f.Status.Error()), true
	}
	return resourceapi.DeviceTaint{}, false
}

func degradedTaint(l linkState, f FabricInfo) (resourceapi.DeviceTaint, bool) {
	switch {
	case l.active < l.total:
		return newTaint(topology.TaintNVLinkDegraded, fmt.Sprintf("%d of %d nvlinks down", l.total-l.active, l.total)), true
	case f.HealthSummary == nvml.GPU_FABRIC_HEALTH_SUMMARY_UNHEALTHY:
		return newTaint(topology.TaintNVLinkDegraded, "fabric health unhealthy"), true
	case f.HealthSummary == nvml.GPU_FABRIC_HEALTH_SUMMARY_LIMITED_CAPACITY:
		return newTaint(topology.TaintNVLinkDegraded, "fabric health limited capacity"), true
	}
	return resourceapi.DeviceTaint{}, false
}

func fabricStateName(s nvml.GpuFabricState) string {
	switch s {
	case nvml.GPU_FABRIC_STATE_NOT_STARTED:
		return "not started"
	case nvml.GPU_FABRIC_STATE_IN_PROGRESS:
		return "in progress"
	case nvml.GPU_FABRIC_STATE_COMPLETED:
		return "completed"
	}
	return fmt.Sprintf("state %d", s)
}

// formatUUID renders 16 bytes in the canonical 8-4-4-4-12 lower-case form.
func formatUUID(u [16]uint8) string {
	return fmt.Sprintf("%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:16])
}
