package inspect

import (
	"slices"
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
