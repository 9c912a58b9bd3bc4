package placementtest

import (
	"fmt"
	"slices"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/gpufabric/gpufabric/pkg/gang/placement"
	"github.com/gpufabric/gpufabric/pkg/topology"
)

// railDevice is what checkRails knows of a published device.
type railDevice struct {
	key     string // driver/pool/device
	kind    string // the type attribute
	rail    int64
	hasRail bool
	tainted bool // a NoSchedule or NoExecute device taint
}

func newRailDevice(key string, d resourceapi.Device) railDevice {
	rd := railDevice{key: key, tainted: slices.ContainsFunc(d.Taints, func(t resourceapi.DeviceTaint) bool {
		return t.Effect == resourceapi.DeviceTaintEffectNoSchedule || t.Effect == resourceapi.DeviceTaintEffectNoExecute
	})}
	if v := d.Attributes[topology.AttrType]; v.StringValue != nil {
		rd.kind = *v.StringValue
	}
	if r, ok := topology.DeviceIBRail(&d); ok {
		rd.rail, rd.hasRail = r, true
	}
	return rd
}

// checkRails checks the IB rails of the decision's members (call it after
// every claim of the decision is recorded in c.used); "GPUs" and "NICs"
// below are the lead and following types of leadKind:
//   - a member's NICs lie on the rails of its GPUs when the gang requires
//     rail alignment, and otherwise whenever its node had, with every
//     other device in use as decided (the other members' included), free
//     GPUs and NICs for an allocation where they do (railsPossible);
//   - with rail alignment required, every member with a GPU on a rail
//     uses the same set of rails (those of its GPUs and NICs).
func (c *Checker) checkRails(g *placement.Gang, d *placement.Decision) error {
	lead, follow := leadKind(g)
	sets := map[string][]string{} // rail set → pods
	for _, pp := range d.Pods {
		own := map[string]bool{}
		var gpus, nics []railDevice
		for _, ca := range d.Claims {
			if ca.Shared || ca.Pod != pp.Name {
				continue
			}
			own[ca.Name] = true
			for _, r := range ca.Allocation.Devices.Results {
				rd := c.devices[r.Driver+"/"+r.Pool+"/"+r.Device]
				switch rd.kind {
				case lead:
					gpus = append(gpus, rd)
				case follow:
					nics = append(nics, rd)
				}
			}
		}
		gpuRails, allRails := railsOf(gpus), railsOf(append(slices.Clone(gpus), nics...))
		if len(gpuRails) == 0 {
			continue
		}
		sets[fmt.Sprint(allRails)] = append(sets[fmt.Sprint(allRails)], pp.Name)
		if len(allRails) == len(gpuRails) {
			continue
		}
		if g.RailAlignmentRequired {
			return fmt.Errorf("pod %s: NICs on rails %v, GPUs on %v, and the gang requires rail alignment", pp.Name, railsOf(nics), gpuRails)
		}
		if c.railsPossible(pp.Node, own, lead, follow, len(gpus), len(nics)) {
			return fmt.Errorf("pod %s: NICs on rails %v, GPUs on %v, though %s had free GPUs and NICs on common rails", pp.Name, railsOf(nics), gpuRails, pp.Node)
		}
	}
	if g.RailAlignmentRequired && len(sets) > 1 {
		return fmt.Errorf("rail alignment required, members use %d rail sets: %v", len(sets), sets)
	}
	return nil
}

// leadKind is the device type whose rails the other one's follow: GPUs,
// unless the gang's claims ask for more NICs than GPUs (the engine's main
// class is the one asked for most, ties to the GPU class by name).
func leadKind(g *placement.Gang) (string, string) {
	count := map[string]int64{}
	for _, m := range g.Members {
		for _, cl := range m.Claims {
			for _, r := range cl.Spec.Devices.Requests {
				if r.Exactly != nil {
					count[r.Exactly.DeviceClassName] += r.Exactly.Count
				}
			}
		}
	}
	if count[topology.NICDeviceClass] > count[topology.GPUDeviceClass] {
		return topology.DeviceTypeNIC, topology.DeviceTypeGPU
	}
	return topology.DeviceTypeGPU, topology.DeviceTypeNIC
}

func railsOf(devs []railDevice) []int64 {
	var out []int64
	for _, d := range devs {
		if d.hasRail {
			out = append(out, d.rail)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// railsPossible reports whether a node has, besides the devices other
// claims use (own: the member's claims), gpus GPUs and nics NICs such that
// every NIC with a rail lies on a rail of the GPUs: by brute force over
// the sets S of rails with a free GPU, of at most gpus rails, holding
// enough free GPUs and NICs (devices without a rail count for every S).
func (c *Checker) railsPossible(node string, own map[string]bool, lead, follow string, gpus, nics int) bool {
	freeGPU, freeNIC := map[int64]int{}, map[int64]int{}
	noneGPU, noneNIC := 0, 0
	for _, rd := range c.nodeDevices[node] {
		user, used := c.used[rd.key]
		if rd.tainted || (used && !own[user]) {
			continue
		}
		switch {
		case rd.kind == lead && rd.hasRail:
			freeGPU[rd.rail]++
		case rd.kind == lead:
			noneGPU++
		case rd.kind == follow && rd.hasRail:
			freeNIC[rd.rail]++
		case rd.kind == follow:
			noneNIC++
		}
	}
	var rails []int64
	for r := range freeGPU {
		rails = append(rails, r)
	}
	slices.Sort(rails)
	for mask := 1; mask < 1<<len(rails); mask++ {
		size, g, n := 0, noneGPU, noneNIC
		for i, r := range rails {
			if mask&(1<<i) != 0 {
				size, g, n = size+1, g+freeGPU[r], n+freeNIC[r]
			}
		}
		if size <= gpus && g >= gpus && n >= nics {
			return true
		}
	}
	return false
}
