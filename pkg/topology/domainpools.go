package topology

import (
	"slices"
	"sort"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/utils/ptr"
)

// DomainPool is the desired cluster-level pool of one NVLink domain: a
// bounded set of channel devices whose pool NodeSelector selects exactly the
// domain's nodes. A claim on one channel therefore pins every pod using it to
// the domain, and several PodGroups can share a domain, one channel each.
type DomainPool struct {
	// Name is FabricDomainPoolName(Domain).
	Name   string
	Domain string
	// Nodes of the domain, sorted.
	Nodes []string
	// GPUs counts the domain's GPUs; HealthyGPUs those without a NoSchedule
	// or NoExecute taint.
	GPUs, HealthyGPUs int
	// NodeSelector matches exactly Nodes by their hostname label
	// (kubernetes.io/hostname In ...). A node field selector cannot be used:
	// the API allows only one value for metadata.name, and one term per pool.
	NodeSelector *v1.NodeSelector
	Devices      []resourceapi.Device
}

// FabricDomainPools computes the desired fabric-domain pools from the
// node-local slices of driver gpufabric.dev: one pool per nvlinkDomain that
// has at least one GPU, each with channels channel devices. hostname returns a
// node's kubernetes.io/hostname label (nil, or "" for a node: its name). The
// result is sorted by pool name and deterministic. Pure.
func FabricDomainPools(slices []*resourceapi.ResourceSlice, hostname func(node string) string, channels int) []DomainPool {
	return TrustedFabricDomainPools(slices, hostname, channels, nil)
}

// TrustedFabricDomainPools is FabricDomainPools without the nodes refuse
// refuses (CheckNodeDomain, given each node's labels): their GPUs count
// in no pool and no pool selects them, so a node that claims another
// domain never reaches its channels. A nil refuse refuses none.
func TrustedFabricDomainPools(slices []*resourceapi.ResourceSlice, hostname func(node string) string, channels int, refuse func(node string, info NodeGPUInfo) bool) []DomainPool {
	nodes := NodeGPUs(slices)
	healthy := healthyGPUs(slices)
	byDomain := map[string]*DomainPool{}
	for node, info := range nodes {
		if info.NVLinkDomain == "" || (refuse != nil && refuse(node, info)) {
			continue
		}
		p := byDomain[info.NVLinkDomain]
		if p == nil {
			p = &DomainPool{Name: FabricDomainPoolName(info.NVLinkDomain), Domain: info.NVLinkDomain}
			byDomain[info.NVLinkDomain] = p
		}
		p.Nodes = append(p.Nodes, node)
		for _, g := range info.Devices {
			if g.NVLinkDomain != info.NVLinkDomain {
				continue
			}
			p.GPUs++
			if healthy[g.Pool+"/"+g.Device] {
				p.HealthyGPUs++
			}
		}
	}
	out := make([]DomainPool, 0, len(byDomain))
	for _, p := range byDomain {
		sort.Strings(p.Nodes)
		p.NodeSelector = hostnameSelector(p.Nodes, hostname)
		p.Devices = channelDevices(p, channels)
		out = append(out, *p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

func hostnameSelector(nodes []string, hostname func(string) string) *v1.NodeSelector {
	values := make([]string, 0, len(nodes))
	for _, n := range nodes {
		h := ""
		if hostname != nil {
			h = hostname(n)
		}
		if h == "" {
			h = n
		}
		values = append(values, h)
	}
	sort.Strings(values)
	return &v1.NodeSelector{NodeSelectorTerms: []v1.NodeSelectorTerm{{
		MatchExpressions: []v1.NodeSelectorRequirement{{
			Key: v1.LabelHostname, Operator: v1.NodeSelectorOpIn, Values: slices.Compact(values),
		}},
	}}}
}

func channelDevices(p *DomainPool, channels int) []resourceapi.Device {
	devices := make([]resourceapi.Device, channels)
	for i := range devices {
		devices[i] = resourceapi.Device{
			Name: ChannelDeviceName(i),
			Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
				AttrType:         {StringValue: ptr.To(DeviceTypeFabricDomain)},
				AttrNVLinkDomain: {StringValue: ptr.To(p.Domain)},
				AttrNodeCount:    {IntValue: ptr.To(int64(len(p.Nodes)))},
				AttrGPUCount:     {IntValue: ptr.To(int64(p.HealthyGPUs))},
				AttrIndex:        {IntValue: ptr.To(int64(i))},
			},
		}
	}
	return devices
}

// healthyGPUs returns "pool/device" of the node-local GPUs that carry no
// NoSchedule or NoExecute taint.
func healthyGPUs(slices []*resourceapi.ResourceSlice) map[string]bool {
	out := map[string]bool{}
	for _, s := range slices {
		if !isNodeLocal(s) {
			continue
		}
		for i := range s.Spec.Devices {
			d := &s.Spec.Devices[i]
			if _, ok := gpuFromDevice(s.Spec.Pool.Name, d); ok && !blockingTaint(d.Taints) {
				out[s.Spec.Pool.Name+"/"+d.Name] = true
			}
		}
	}
	return out
}

func blockingTaint(taints []resourceapi.DeviceTaint) bool {
	for _, t := range taints {
		if t.Effect == resourceapi.DeviceTaintEffectNoSchedule || t.Effect == resourceapi.DeviceTaintEffectNoExecute {
			return true
		}
	}
	return false
}
