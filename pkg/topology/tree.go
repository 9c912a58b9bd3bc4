package topology

import (
	"fmt"
	"slices"
	"sort"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
)

// Topology keys that are not node labels.
const (
	// TopologyKeyNVLinkDomain names level 0 of the fabric tree, the NVLink
	// domain, as schedulingConstraints.topology[0].key spells it.
	TopologyKeyNVLinkDomain = DriverName + "/" + string(AttrNVLinkDomain)
	// TopologyKeyCluster names the top level: one domain holding every node.
	TopologyKeyCluster = DriverName + "/cluster"
	// ClusterDomainID is the id of the single domain at the top level.
	ClusterDomainID = "cluster"
)

// TreeConfig says which levels the fabric tree has above the NVLink domain.
type TreeConfig struct {
	// LabelLevels are node label keys, innermost first (e.g. rack, IB leaf,
	// spine). They must be distinct and must not be one of the reserved keys.
	LabelLevels []string
	// RequireAdminLabels trusts a node's multi-node NVLink domain only when
	// the admin label LabelAdminNVLinkDomain confirms it (CheckNodeDomain).
	RequireAdminLabels bool
}

// Tree is a cluster's fabric tree. Level 0 groups nodes by the nvlinkDomain
// of their GPUs, each configured label level groups nodes by that label's
// value, and the last level is the whole cluster.
//
// Rules: a node is in exactly one level-0 domain and in the cluster domain,
// unless it is refused (CheckNodeDomain: what its slices declare contradicts
// its admin label, or lacks one that is required): a refused node is in no
// domain of any level, so nothing is placed on it; a node without a label
// of a label level is in no domain of that level.
// Every slice in Tree is sorted (levels innermost first, domains by id,
// nodes by name), so iterating it is deterministic.
type Tree struct {
	Levels []*Level
	// Warnings lists inconsistencies found while building (a node whose GPUs
	// disagree on nvlinkDomain, a domain whose nodes disagree on a parent).
	Warnings []string
	// Refused are the nodes left out of every domain, by name.
	Refused  []NodeRefusal
	nodeGPUs map[string]int
	refused  map[string]bool
}

// Level is one level of the tree.
type Level struct {
	// Index is the position in Tree.Levels; 0 is the NVLink domain.
	Index int
	// Key is the topology key: TopologyKeyNVLinkDomain, a node label key,
	// or TopologyKeyCluster.
	Key string
	// Domains sorted by ID.
	Domains []*Domain
	byID    map[string]*Domain
	byNode  map[string]*Domain
}

// Domain is a set of nodes that share a value at one level.
type Domain struct {
	Level int
	Key   string
	// ID is the nvlinkDomain id, the label value, or ClusterDomainID.
	ID string
	// Nodes sorted by name.
	Nodes []string
	// GPUs is the number of GPUs published in the nodes' local pools.
	GPUs int
	// Parent is the domain one level up that holds this domain's first node,
	// or the nearest level above where that node has a domain. Nil at the top.
	Parent *Domain
	// Children sorted by ID.
	Children []*Domain
}

// BuildTree builds the fabric tree from the Nodes and the ResourceSlices of
// driver gpufabric.dev. Only node-local pools (spec.nodeName set) at their
// newest generation count; a node's level-0 domain is the smallest
// nvlinkDomain value among its GPU devices (type=gpu), or NodeDomainID(none)
// for a node without GPUs.
func BuildTree(cfg TreeConfig, nodes []*v1.Node, resourceSlices []*resourceapi.ResourceSlice) (*Tree, error) {
	if err := validateTreeConfig(cfg); err != nil {
		return nil, err
	}
	sorted := slices.Clone(nodes)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Name < sorted[j].Name })

	t := &Tree{nodeGPUs: make(map[string]int, len(sorted)), refused: map[string]bool{}}
	gpus := NodeGPUs(resourceSlices)
	level0 := make(map[string]string, len(sorted))
	trusted := sorted[:0:0]
	for _, node := range sorted {
		info := gpus[node.Name]
		t.nodeGPUs[node.Name] = len(info.Devices)
		if r := CheckNodeDomain(node.Name, node.Labels, info, cfg.RequireAdminLabels); r != nil {
			t.Refused = append(t.Refused, *r)
			t.refused[node.Name] = true
			continue
		}
		trusted = append(trusted, node)
		domain := info.NVLinkDomain
		if domain == "" {
			domain = NodeDomainID(DomainKindNone, node.Name)
		}
		if len(info.Domains) > 1 {
			t.Warnings = append(t.Warnings, fmt.Sprintf("node %s: GPUs disagree on nvlinkDomain %v, using %s", node.Name, info.Domains, domain))
		}
		level0[node.Name] = domain
	}
	sorted = trusted
	t.Levels = append(t.Levels, t.newLevel(0, TopologyKeyNVLinkDomain, sorted, func(n *v1.Node) (string, bool) { return level0[n.Name], true }))
	for _, key := range cfg.LabelLevels {
		t.Levels = append(t.Levels, t.newLevel(len(t.Levels), key, sorted, labelValue(key)))
	}
	t.Levels = append(t.Levels, t.newLevel(len(t.Levels), TopologyKeyCluster, sorted, func(*v1.Node) (string, bool) { return ClusterDomainID, true }))
	t.link()
	return t, nil
}

func validateTreeConfig(cfg TreeConfig) error {
	seen := map[string]bool{}
	for _, key := range cfg.LabelLevels {
		switch {
		case key == "":
			return fmt.Errorf("empty label level")
		case key == TopologyKeyNVLinkDomain || key == TopologyKeyCluster:
			return fmt.Errorf("label level %q is reserved", key)
		case seen[key]:
			return fmt.Errorf("label level %q repeated", key)
		}
		seen[key] = true
	}
	return nil
}

func labelValue(key string) func(*v1.Node) (string, bool) {
	return func(n *v1.Node) (string, bool) {
		v, ok := n.Labels[key]
		return v, ok
	}
}

// NewLabelLevel groups nodes by a node label that is not a configured level
// of the tree (for a topology key that names any node label). The level has
// Index -1 and no parent links; nodes without the label, and refused
// nodes, are left out.
func (t *Tree) NewLabelLevel(key string, nodes []*v1.Node) *Level {
	sorted := slices.DeleteFunc(slices.Clone(nodes), func(n *v1.Node) bool { return t.refused[n.Name] })
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Name < sorted[j].Name })
	return t.newLevel(-1, key, sorted, labelValue(key))
}

// newLevel groups sorted nodes by value; nodes for which value reports false
// are left out.
func (t *Tree) newLevel(index int, key string, sorted []*v1.Node, value func(*v1.Node) (string, bool)) *Level {
	l := &Level{Index: index, Key: key, byID: map[string]*Domain{}, byNode: map[string]*Domain{}}
	for _, node := range sorted {
		id, ok := value(node)
		if !ok {
			continue
		}
		d := l.byID[id]
		if d == nil {
			d = &Domain{Level: index, Key: key, ID: id}
			l.byID[id] = d
			l.Domains = append(l.Domains, d)
		}
		d.Nodes = append(d.Nodes, node.Name)
		d.GPUs += t.nodeGPUs[node.Name]
		l.byNode[node.Name] = d
	}
	sort.Slice(l.Domains, func(i, j int) bool { return l.Domains[i].ID < l.Domains[j].ID })
	return l
}

// link sets Parent and Children, and warns about domains whose nodes have
// different parents (the label levels are not nested).
func (t *Tree) link() {
	for i := 0; i+1 < len(t.Levels); i++ {
		for _, d := range t.Levels[i].Domains {
			for j := i + 1; j < len(t.Levels); j++ {
				if p := t.Levels[j].byNode[d.Nodes[0]]; p != nil {
					d.Parent = p
					p.Children = append(p.Children, d)
					break
				}
			}
			for _, n := range d.Nodes[1:] {
				if p := t.Levels[i+1].byNode[n]; p != t.Levels[i+1].byNode[d.Nodes[0]] {
					t.Warnings = append(t.Warnings, fmt.Sprintf("%s %s: nodes %s and %s differ at %s", d.Key, d.ID, d.Nodes[0], n, t.Levels[i+1].Key))
					break
				}
			}
		}
	}
	for _, l := range t.Levels {
		for _, d := range l.Domains {
			sort.Slice(d.Children, func(a, b int) bool { return d.Children[a].ID < d.Children[b].ID })
		}
	}
}

// Level returns the level with the given topology key, or nil.
func (t *Tree) Level(key string) *Level {
	for _, l := range t.Levels {
		if l.Key == key {
			return l
		}
	}
	return nil
}

// IsRefused reports whether the node is left out of every domain.
func (t *Tree) IsRefused(node string) bool { return t.refused[node] }

// NodeGPUCount returns the number of GPUs published for a node.
func (t *Tree) NodeGPUCount(node string) int { return t.nodeGPUs[node] }

// Domain returns the domain with the given id, or nil.
func (l *Level) Domain(id string) *Domain { return l.byID[id] }

// DomainOf returns the domain holding the node, or nil.
func (l *Level) DomainOf(node string) *Domain { return l.byNode[node] }
