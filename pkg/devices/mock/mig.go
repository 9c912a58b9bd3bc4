package mock

import (
	"crypto/sha256"
	"fmt"
	"slices"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	nvmlmock "github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
	"github.com/google/uuid"
)

// MIG in the mock: go-nvml's servers create GPU and compute instances; on
// top of that the mock behaves like the driver where gpufabric relies on
// it: an instance only on a MIG-enabled GPU, only at a possible placement
// and only where no other instance is; MIG device handles with stable
// UUIDs; and /proc/driver/nvidia-caps/mig-minors.

// maxMIGDevices is GetMaxMigDeviceCount.
const maxMIGDevices = 7

// setMIG wraps instance creation with the driver's checks and adds the MIG
// device handles.
func setMIG(dev *server.Device) {
	create := dev.CreateGpuInstanceWithPlacementFunc
	dev.CreateGpuInstanceWithPlacementFunc = func(info *nvml.GpuInstanceProfileInfo, p *nvml.GpuInstancePlacement) (nvml.GpuInstance, nvml.Return) {
		if ret := checkPlacement(dev, info, p); ret != nvml.SUCCESS {
			return nil, ret
		}
		return create(info, p)
	}
	dev.GetMaxMigDeviceCountFunc = func() (int, nvml.Return) { return maxMIGDevices, nvml.SUCCESS }
	dev.GetMigDeviceHandleByIndexFunc = func(i int) (nvml.Device, nvml.Return) {
		migs := migDevices(dev)
		if i < 0 || i >= len(migs) {
			return nil, nvml.ERROR_NOT_FOUND
		}
		return migs[i], nvml.SUCCESS
	}
}

func checkPlacement(dev *server.Device, info *nvml.GpuInstanceProfileInfo, p *nvml.GpuInstancePlacement) nvml.Return {
	dev.RLock()
	defer dev.RUnlock()
	if dev.MigMode != nvml.DEVICE_MIG_ENABLE {
		return nvml.ERROR_NOT_SUPPORTED
	}
	if !slices.Contains(dev.Config.MIGProfiles.GpuInstancePlacements[int(info.Id)], *p) {
		return nvml.ERROR_INVALID_ARGUMENT
	}
	for gi := range dev.GpuInstances {
		q := gi.Info.Placement
		if p.Start < q.Start+q.Size && q.Start < p.Start+p.Size {
			return nvml.ERROR_INSUFFICIENT_RESOURCES
		}
	}
	return nvml.SUCCESS
}

// migDevices are the MIG devices of the GPU's compute instances, by GPU
// instance id, then compute instance id.
func migDevices(dev *server.Device) []nvml.Device {
	type pair struct{ gi, ci uint32 }
	var pairs []pair
	dev.RLock()
	for gi := range dev.GpuInstances {
		gi.RLock()
		for ci := range gi.ComputeInstances {
			pairs = append(pairs, pair{gi.Info.Id, ci.Info.Id})
		}
		gi.RUnlock()
	}
	dev.RUnlock()
	slices.SortFunc(pairs, func(a, b pair) int {
		if a.gi != b.gi {
			return int(a.gi) - int(b.gi)
		}
		return int(a.ci) - int(b.ci)
	})
	out := make([]nvml.Device, 0, len(pairs))
	for _, p := range pairs {
		sum := sha256.Sum256(fmt.Appendf(nil, "%s/gi%d/ci%d", dev.UUID, p.gi, p.ci))
		u, _ := uuid.FromBytes(sum[:16])
		giID, ciID := int(p.gi), int(p.ci)
		out = append(out, &nvmlmock.Device{
			GetUUIDFunc:              func() (string, nvml.Return) { return "MIG-" + u.String(), nvml.SUCCESS },
			GetGpuInstanceIdFunc:     func() (int, nvml.Return) { return giID, nvml.SUCCESS },
			GetComputeInstanceIdFunc: func() (int, nvml.Return) { return ciID, nvml.SUCCESS },
			IsMigDeviceHandleFunc:    func() (bool, nvml.Return) { return true, nvml.SUCCESS },
		})
	}
	return out
}

// migMinors is /proc/driver/nvidia-caps/mig-minors as the driver writes it:
// config and monitor, then per GPU minor, GPU instance 0..14 and compute
// instance 0..7, numbered in that order.
func migMinors(gpus int) string {
	var b strings.Builder
	b.WriteString("config 1\nmonitor 2\n")
	n := 3
	for g := range gpus {
		for gi := range 15 {
			fmt.Fprintf(&b, "gpu%d/gi%d/access %d\n", g, gi, n)
			n++
			for ci := range 8 {
				fmt.Fprintf(&b, "gpu%d/gi%d/ci%d/access %d\n", g, gi, ci, n)
				n++
			}
		}
	}
	return b.String()
}
