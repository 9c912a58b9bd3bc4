package inspect

import (
	"fmt"
	"slices"
	"sort"

	"github.com/gpufabric/gpufabric/pkg/topology"
)

// BuildNodes reports, per node that publishes devices of gpufabric.dev, its
// GPUs (counts, models, rails), NICs, device taints and node taints.
func BuildNodes(c *Cluster, opts Options) (*NodesReport, error) {
	ix, err := newIndex(c, opts)
	if err != nil {
		return nil, err
	}
	rep := &NodesReport{Levels: slices.Clone(opts.Levels), Nodes: []NodeInfo{}}
	for _, name := range ix.nodeNames {
		if len(ix.byNode[name]) == 0 {
			rep.OtherNodes++
			continue
		}
		rep.Nodes = append(rep.Nodes, ix.nodeInfo(name))
	}
	return rep, nil
}

func (ix *index) nodeInfo(name string) NodeInfo {
	n := NodeInfo{Name: name}
	if d := ix.tree.Levels[0].DomainOf(name); d != nil {
		n.NVLinkDomain = d.ID
	}
	for _, l := range ix.tree.Levels[1 : len(ix.tree.Levels)-1] {
		v := ""
		if d := l.DomainOf(name); d != nil {
			v = d.ID
		}
		n.Levels = append(n.Levels, v)
	}
	gpuRails, taints := map[int64]bool{}, map[string]*DeviceTaint{}
	for _, d := range ix.byNode[name] {
		switch d.Type {
		case topology.DeviceTypeGPU:
			ix.count(&n.GPUs, d)
			if d.Product != "" && !slices.Contains(n.Models, d.Product) {
				n.Models = append(n.Models, d.Product)
			}
			if d.HasRail {
				gpuRails[d.Rail] = true
			}
		case topology.DeviceTypeNIC:
			nic := NICInfo{Name: d.Name, PortState: d.PortState, RateGbps: d.RateGbps}
			if d.HasRail {
				nic.Rail = &d.Rail
			}
			n.NICs = append(n.NICs, nic)
		}
		for _, t := range d.Taints {
			k := fmt.Sprintf("%s=%s:%s", t.Key, t.Value, t.Effect)
			if taints[k] == nil {
				taints[k] = &DeviceTaint{Key: t.Key, Value: t.Value, Effect: string(t.Effect)}
			}
			taints[k].Devices = append(taints[k].Devices, d.Name)
		}
	}
	sort.Strings(n.Models)
	n.GPURails = sortedKeys(gpuRails)
	for _, k := range sortedKeys(taints) {
		n.DeviceTaints = append(n.DeviceTaints, *taints[k])
	}
	if node := ix.nodes[name]; node != nil {
		n.Unschedulable = node.Spec.Unschedulable
		for _, t := range node.Spec.Taints {
			n.NodeTaints = append(n.NodeTaints, taintString(t.Key, t.Value, string(t.Effect)))
		}
	}
	return n
}

// taintString spells a taint as kubectl does: key=value:effect, key:effect
// without a value.
func taintString(key, value, effect string) string {
	if value == "" {
		return key + ":" + effect
	}
	return key + "=" + value + ":" + effect
}

func sortedKeys[K int64 | string, V any](m map[K]V) []K {
	if len(m) == 0 {
		return nil
	}
	out := make([]K, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
