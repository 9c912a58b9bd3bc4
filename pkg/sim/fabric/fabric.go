package fabric

import (
	"fmt"
	"os"
	"sort"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"sigs.k8s.io/yaml"

	"github.com/gpufabric/gpufabric/pkg/gang/placement/index"
	"github.com/gpufabric/gpufabric/pkg/gang/placement/scenario"
	"github.com/gpufabric/gpufabric/pkg/sim/trees"
	"github.com/gpufabric/gpufabric/pkg/topology"
)

// Fabric kinds that Generate builds.
const (
	// KindNVL72: domains of 18 nodes × 4 GPUs sharing one multi-node NVLink
	// domain; one domain is one rack; RacksPerLeaf racks per IB leaf.
	KindNVL72 = "nvl72"
	// KindHGX: 8-GPU nodes, each its own NVSwitch domain; NodesPerRack
	// nodes per rack, RacksPerLeaf racks per leaf.
	KindHGX = "hgx"
)

// Node label keys of the generated fabrics, innermost first.
const (
	LabelRack = "rack"
	LabelLeaf = "leaf"
)

// Spec describes a generated cluster.
type Spec struct {
	Kind string `json:"kind"`
	// Size is the number of NVL72 domains (nvl72) or of nodes (hgx).
	Size         int `json:"size"`
	NodesPerRack int `json:"nodesPerRack,omitempty"` // hgx only; default 16
	RacksPerLeaf int `json:"racksPerLeaf,omitempty"` // default 8
}

// Fabric is a cluster as API objects plus the indexes the simulator uses.
// Nodes are indexed by position in name order.
type Fabric struct {
	Name  string
	Input index.SnapshotInput // Nodes, ResourceSlices, DeviceClasses
	Tree  *topology.Tree
	// Levels are the tree's levels below the cluster: 0 is the NVLink
	// domain, then the label levels.
	Levels    []string
	NodeNames []string
	NodeIndex map[string]int
	GPUs      []int // per node
	TotalGPUs int
	// Busy GPUs per node of the existing load (allocated claims on the
	// node's local pools).
	Busy []int
	// DomainOf[l][n] is node n's domain index at level l, -1 when none.
	DomainOf [][]int
	// Domains[l] lists level l's domains (ids sorted, node indexes sorted).
	Domains [][]Domain
	// MaxNVLinkGPUs is the size of the largest NVLink domain.
	MaxNVLinkGPUs int
	// Topo is the fabric as the tree policies and metrics see it (with
	// each GPU's IB rail); BusyDevs the positions of the existing load's
	// GPUs and GPUPos each node's GPU positions by "pool/device" (rails of
	// the engine's allocations).
	Topo     *trees.Topology
	BusyDevs [][]int
	GPUPos   []map[string]int
}

// Domain is one domain of a level.
type Domain struct {
	ID    string
	Nodes []int
	GPUs  int
}

// Generate builds a cluster from a spec.
func Generate(spec Spec) (*Fabric, error) {
	if spec.Size <= 0 {
		return nil, fmt.Errorf("fabric size %d: must be positive", spec.Size)
	}
	rpl := spec.RacksPerLeaf
	if rpl <= 0 {
		rpl = 8
	}
	sc := scenario.Scenario{Levels: []string{LabelRack, LabelLeaf}}
	var name string
	switch spec.Kind {
	case KindNVL72:
		name = fmt.Sprintf("%d NVL72 domains (18 nodes × 4 GPUs), %d racks/leaf", spec.Size, rpl)
		for d := range spec.Size {
			id := fmt.Sprintf("nvl%03d", d)
			sc.Domains = append(sc.Domains, scenario.DomainSpec{
				ID: id, Nodes: 18, GPUsPerNode: 4, CPU: "144", Memory: "1Ti",
				Labels: map[string]string{LabelRack: id, LabelLeaf: fmt.Sprintf("leaf%02d", d/rpl)},
			})
		}
	case KindHGX:
		npr := spec.NodesPerRack
		if npr <= 0 {
			npr = 16
		}
		name = fmt.Sprintf("%d HGX nodes × 8 GPUs, %d nodes/rack, %d racks/leaf", spec.Size, npr, rpl)
		for rack := 0; rack*npr < spec.Size; rack++ {
			id := fmt.Sprintf("r%03d", rack)
			sc.Domains = append(sc.Domains, scenario.DomainSpec{
				ID: id, Kind: string(topology.DomainKindNVSwitch), Nodes: min(npr, spec.Size-rack*npr), GPUsPerNode: 8,
				CPU: "128", Memory: "2Ti",
				Labels: map[string]string{LabelRack: id, LabelLeaf: fmt.Sprintf("leaf%02d", rack/rpl)},
			})
		}
	default:
		return nil, fmt.Errorf("unknown fabric kind %q", spec.Kind)
	}
	built, err := scenario.Build(sc)
	if err != nil {
		return nil, fmt.Errorf("build fabric: %w", err)
	}
	return New(name, sc.Levels, built.Input)
}

// File is the YAML (or JSON) form of a cluster: node label levels
// innermost first, Nodes, and ResourceSlices of driver gpufabric.dev.
// Optional Pods (bound) and allocated ResourceClaims are existing load that
// stays for the whole run.
type File struct {
	Levels         []string                    `json:"levels,omitempty"`
	Nodes          []v1.Node                   `json:"nodes"`
	ResourceSlices []resourceapi.ResourceSlice `json:"resourceSlices"`
	Pods           []v1.Pod                    `json:"pods,omitempty"`
	ResourceClaims []resourceapi.ResourceClaim `json:"resourceClaims,omitempty"`
}

// Load reads a File.
func Load(path string) (*Fabric, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read fabric: %w", err)
	}
	var ff File
	if err := yaml.UnmarshalStrict(data, &ff); err != nil {
		return nil, fmt.Errorf("parse fabric %s: %w", path, err)
	}
	return New(path, ff.Levels, index.SnapshotInput{
		Nodes: pointers(ff.Nodes), ResourceSlices: pointers(ff.ResourceSlices),
		Pods: pointers(ff.Pods), ResourceClaims: pointers(ff.ResourceClaims),
	})
}

func pointers[T any](v []T) []*T {
	out := make([]*T, len(v))
	for i := range v {
		out[i] = &v[i]
	}
	return out
}

// New indexes a cluster with the fabric tree: in.Nodes and
// in.ResourceSlices, plus existing load (in.Pods, allocated
// in.ResourceClaims). Without DeviceClasses, the GPU and fabric-domain
// classes are used.
func New(name string, levels []string, in index.SnapshotInput) (*Fabric, error) {
	tree, err := topology.BuildTree(topology.TreeConfig{LabelLevels: levels}, in.Nodes, in.ResourceSlices)
	if err != nil {
		return nil, fmt.Errorf("fabric tree: %w", err)
	}
	if len(in.DeviceClasses) == 0 {
		in.DeviceClasses = scenario.DeviceClasses()
	}
	f := &Fabric{Name: name, Input: in, Tree: tree, NodeIndex: map[string]int{}}
	for _, n := range in.Nodes {
		f.NodeNames = append(f.NodeNames, n.Name)
	}
	sort.Strings(f.NodeNames)
	for i, n := range f.NodeNames {
		if _, dup := f.NodeIndex[n]; dup {
			return nil, fmt.Errorf("node %s listed twice", n)
		}
		f.NodeIndex[n] = i
		g := tree.NodeGPUCount(n)
		f.GPUs = append(f.GPUs, g)
		f.TotalGPUs += g
	}
	if f.TotalGPUs == 0 {
		return nil, fmt.Errorf("fabric %s has no GPUs", name)
	}
	gpus := topology.NodeGPUs(in.ResourceSlices)
	f.BusyDevs = busyGPUs(f, in, gpus)
	for _, b := range f.BusyDevs {
		f.Busy = append(f.Busy, len(b))
	}
	for _, l := range tree.Levels[:len(tree.Levels)-1] {
		f.addLevel(l)
	}
	for _, d := range f.Domains[0] {
		f.MaxNVLinkGPUs = max(f.MaxNVLinkGPUs, d.GPUs)
	}
	f.topo(gpus)
	return f, nil
}

// topo builds Topo and GPUPos: GPU positions are a node's GPUs in slice
// order (by pool, then device name).
func (f *Fabric) topo(gpus map[string]topology.NodeGPUInfo) {
	t := &trees.Topology{Levels: f.Levels, GPUs: f.GPUs, DomainOf: f.DomainOf}
	for _, doms := range f.Domains {
		var out []trees.Domain
		for _, d := range doms {
			out = append(out, trees.Domain{ID: d.ID, Nodes: d.Nodes})
		}
		t.Domains = append(t.Domains, out)
	}
	f.GPUPos = make([]map[string]int, len(f.NodeNames))
	for i, n := range f.NodeNames {
		rails := make([]int64, f.GPUs[i])
		for j := range rails {
			rails[j] = -1
		}
		f.GPUPos[i] = map[string]int{}
		for j, g := range gpus[n].Devices {
			if j < len(rails) && g.HasIBRail {
				rails[j] = g.IBRail
			}
			f.GPUPos[i][g.Pool+"/"+g.Device] = j
		}
		t.Rails = append(t.Rails, rails)
	}
	f.Topo = t
}

func (f *Fabric) addLevel(l *topology.Level) {
	of := make([]int, len(f.NodeNames))
	for i := range of {
		of[i] = -1
	}
	var doms []Domain
	for di, d := range l.Domains {
		dom := Domain{ID: d.ID, GPUs: d.GPUs}
		for _, n := range d.Nodes {
			i := f.NodeIndex[n]
			of[i] = di
			dom.Nodes = append(dom.Nodes, i)
		}
		sort.Ints(dom.Nodes)
		doms = append(doms, dom)
	}
	f.Levels = append(f.Levels, l.Key)
	f.DomainOf = append(f.DomainOf, of)
	f.Domains = append(f.Domains, doms)
}

// Level returns the index of a level key, or -1.
func (f *Fabric) Level(key string) int {
	for i, k := range f.Levels {
		if k == key {
			return i
		}
	}
	return -1
}

// GPUsPerNode is the most common GPU count of a node (for pod sizes).
func (f *Fabric) GPUsPerNode() int {
	count := map[int]int{}
	best := 0
	for _, g := range f.GPUs {
		count[g]++
		if g > 0 && (count[g] > count[best] || count[g] == count[best] && g > best) {
			best = g
		}
	}
	return best
}

// busyGPUs lists, per node, the positions (in gpus' order) of the GPUs of
// node-local pools allocated by in's claims.
func busyGPUs(f *Fabric, in index.SnapshotInput, gpus map[string]topology.NodeGPUInfo) [][]int {
	busy := make([][]int, len(f.NodeNames))
	poolNode := map[[2]string]int{}
	for _, sl := range in.ResourceSlices {
		if sl.Spec.NodeName != nil {
			if i, ok := f.NodeIndex[*sl.Spec.NodeName]; ok {
				poolNode[[2]string{sl.Spec.Driver, sl.Spec.Pool.Name}] = i
			}
		}
	}
	for _, c := range in.ResourceClaims {
		if c.Status.Allocation == nil {
			continue
		}
		for _, r := range c.Status.Allocation.Devices.Results {
			i, ok := poolNode[[2]string{r.Driver, r.Pool}]
			if !ok {
				continue
			}
			for j, g := range gpus[f.NodeNames[i]].Devices {
				if g.Pool == r.Pool && g.Device == r.Device {
					busy[i] = append(busy[i], j)
				}
			}
		}
	}
	return busy
}

// RackOf returns a node's rack: its domain at the level of label LabelRack
// (the NVLink domain when there is none), -1 when it has none.
func (f *Fabric) RackOf(node int) int {
	l := max(f.Level(LabelRack), 0)
	return f.DomainOf[l][node]
}

// ReplaceLevel is the level of a node's replacement domain: its NVLink
// domain when that holds more than one node (NVL72), else its rack (HGX:
// every node is its own NVSwitch domain).
func (f *Fabric) ReplaceLevel(node int) int {
	if d := f.DomainOf[0][node]; d >= 0 && len(f.Domains[0][d].Nodes) > 1 {
		return 0
	}
	return max(f.Level(LabelRack), 0)
}

// DomainNodes is the nodes of node's domain at level l (just node when it
// has none).
func (f *Fabric) DomainNodes(l, node int) []int {
	if l < 0 || f.DomainOf[l][node] < 0 {
		return []int{node}
	}
	return f.Domains[l][f.DomainOf[l][node]].Nodes
}

// LosesNVLink says whether a pod moved from node `from` to node `to` left
// a multi-node NVLink domain.
func (f *Fabric) LosesNVLink(from, to int) bool {
	d := f.DomainOf[0][from]
	return d >= 0 && len(f.Domains[0][d].Nodes) > 1 && f.DomainOf[0][to] != d
}
