package scenario

import (
	"cmp"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sort"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpufabric/gpufabric/pkg/gang/placement"
	"github.com/gpufabric/gpufabric/pkg/gang/placement/index"
	"github.com/gpufabric/gpufabric/pkg/gang/placement/spares"
	"github.com/gpufabric/gpufabric/pkg/topology"
)

// Scenario is a fabric, its existing load, and gangs to place in order.
type Scenario struct {
	// Levels are the node label levels above the NVLink domain.
	Levels  []string     `json:"levels,omitempty"`
	Domains []DomainSpec `json:"domains"`
	Load    []LoadSpec   `json:"load,omitempty"`
	Gangs   []GangSpec   `json:"gangs"`
	// Spares is the engine's spare-node policy (placement.Config.Spares).
	Spares spares.Policy `json:"spares,omitempty"`
}

// DomainSpec is a group of identical nodes. Kind mnnvl (default): the nodes
// share one NVLink domain ID with a fabric-domain pool of Channels
// channels; kind nvswitch: every node is its own NVLink domain.
type DomainSpec struct {
	ID          string            `json:"id"`
	Kind        string            `json:"kind,omitempty"`
	Nodes       int               `json:"nodes"`
	GPUsPerNode int               `json:"gpusPerNode"`
	Rails       []int64           `json:"rails,omitempty"` // per GPU index; default = index
	Labels      map[string]string `json:"labels,omitempty"`
	Channels    int               `json:"channels,omitempty"`
	CPU         string            `json:"cpu,omitempty"`
	Memory      string            `json:"memory,omitempty"`
	Taints      []v1.Taint        `json:"taints,omitempty"`
	// NodeLabels adds labels to single nodes, by index.
	NodeLabels map[int]map[string]string `json:"nodeLabels,omitempty"`
	// NodeRails overrides Rails for single nodes, by index.
	NodeRails map[int][]int64 `json:"nodeRails,omitempty"`
	// NUMA is the NUMA node of each GPU, by index (the standard
	// resource.kubernetes.io/numaNode attribute); GPUs beyond its length
	// publish none.
	NUMA []int64 `json:"numa,omitempty"`
	// DeviceTaint is the key of a NoSchedule device taint on the GPUs of
	// the nodes in TaintedNodes (by index), as the plugin publishes for
	// NVLink-degraded trays.
	DeviceTaint  string `json:"deviceTaint,omitempty"`
	TaintedNodes []int  `json:"taintedNodes,omitempty"`
	// NICsPerNode NICs (nic-mlx5-0..) per node, on the rails NICRails (per
	// NIC index; default = index), or NodeNICRails for single nodes.
	NICsPerNode  int             `json:"nicsPerNode,omitempty"`
	NICRails     []int64         `json:"nicRails,omitempty"`
	NodeNICRails map[int][]int64 `json:"nodeNICRails,omitempty"`
	// NICTaint is the key of a NoSchedule device taint on the NICs
	// TaintedNICs (by index) of every node.
	NICTaint    string `json:"nicTaint,omitempty"`
	TaintedNICs []int  `json:"taintedNICs,omitempty"`
}

// LoadSpec is an existing pod on a node using some GPUs and NICs (by
// index).
type LoadSpec struct {
	Node   string `json:"node"`
	GPUs   []int  `json:"gpus,omitempty"`
	NICs   []int  `json:"nics,omitempty"`
	CPU    string `json:"cpu,omitempty"`
	Memory string `json:"memory,omitempty"`
}

// GangSpec is a PodGroup of identical pods, each with a claim for
// GPUsPerPod GPUs, and optionally a shared fabric-domain claim.
type GangSpec struct {
	Name                 string `json:"name"`
	Pods                 int    `json:"pods"`
	GPUsPerPod           int64  `json:"gpusPerPod"`
	CPU                  string `json:"cpu,omitempty"`
	Memory               string `json:"memory,omitempty"`
	TopologyKey          string `json:"topologyKey,omitempty"`
	PreferredTopologyKey string `json:"preferredTopologyKey,omitempty"`
	RailAlignment        string `json:"railAlignment,omitempty"`
	// TopologySpread is the gpufabric.dev/topology-spread annotation.
	TopologySpread string            `json:"topologySpread,omitempty"`
	FabricClaim    bool              `json:"fabricClaim,omitempty"`
	Tolerations    []v1.Toleration   `json:"tolerations,omitempty"`
	NodeSelector   map[string]string `json:"nodeSelector,omitempty"`
	// MinCount is the gang's minCount (default: Pods).
	MinCount int `json:"minCount,omitempty"`
	// BoundNodes are nodes where members of the gang already run: the pods
	// here are late members that must join them.
	BoundNodes []string `json:"boundNodes,omitempty"`
	// OnePerNode gives the members a required pod anti-affinity on
	// kubernetes.io/hostname against each other (label gang=<name>).
	OnePerNode bool `json:"onePerNode,omitempty"`
	// VolumeNodes pins every member to these nodes, as a bound local
	// persistent volume's node affinity would.
	VolumeNodes []string `json:"volumeNodes,omitempty"`
	// FirstAvailable, when set, replaces GPUsPerPod: each member's GPU
	// claim asks for these counts as prioritized alternatives.
	FirstAvailable []int64 `json:"firstAvailable,omitempty"`
	// PodGPUs, when set, makes a heterogeneous gang: pod i gets a claim
	// for PodGPUs[i].GPUs GPUs (none when 0), all on one NUMA node when
	// SameNUMA. The gang then has len(PodGPUs) pods; Pods, GPUsPerPod and
	// FirstAvailable are ignored.
	PodGPUs []PodGPUSpec `json:"podGPUs,omitempty"`
	// NICsPerPod NICs per pod: a second request ("nics") of the pod's GPU
	// claim, or, with SeparateNICClaim (or when the GPU claim has a
	// constraint or there is none), a claim of its own (<pod>-nic).
	NICsPerPod       int64 `json:"nicsPerPod,omitempty"`
	SeparateNICClaim bool  `json:"separateNICClaim,omitempty"`
	// SegmentSize and SegmentTopologyKey are the annotations
	// gpufabric.dev/segment-size (when not 0) and
	// gpufabric.dev/segment-topology-key (when not "").
	SegmentSize        int    `json:"segmentSize,omitempty"`
	SegmentTopologyKey string `json:"segmentTopologyKey,omitempty"`
	// Running are members that already run, by node: their pods are named
	// after the pending ones (<name>-NN from Pods on), and the pods here
	// are late members. For segmented gangs; BoundNodes is set to them.
	Running []string `json:"running,omitempty"`
	// PreviousNodes: the gang restarts whole after running on these nodes
	// (placement.Gang.PreviousNodes).
	PreviousNodes []string `json:"previousNodes,omitempty"`
}

// PodGPUSpec is one pod's GPU claim in a heterogeneous gang.
type PodGPUSpec struct {
	GPUs     int64 `json:"gpus"`
	SameNUMA bool  `json:"sameNUMA,omitempty"`
}

// pod is one member of the gang, using the named claims.
func (gs GangSpec) pod(name string, claims []string) *v1.Pod {
	p := Pod(name, orDefault(gs.CPU, "1"), orDefault(gs.Memory, "1Gi"), claims...)
	p.Spec.Tolerations = gs.Tolerations
	p.Spec.NodeSelector = gs.NodeSelector
	p.Spec.SchedulingGroup = &v1.PodSchedulingGroup{PodGroupName: ptrTo(gs.Name)}
	if gs.OnePerNode {
		p.Labels = map[string]string{"gang": gs.Name}
		p.Spec.Affinity = &v1.Affinity{PodAntiAffinity: &v1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []v1.PodAffinityTerm{{
			LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"gang": gs.Name}},
			TopologyKey:   v1.LabelHostname,
		}}}}
	}
	return p
}

// gpuClaim is pod i's GPU claim, or nil when it asks for none.
func (gs GangSpec) gpuClaim(i int, name string) *resourceapi.ResourceClaim {
	switch {
	case len(gs.PodGPUs) > 0 && gs.PodGPUs[i].SameNUMA:
		return SameNUMAGPUClaim(name, gs.PodGPUs[i].GPUs)
	case len(gs.PodGPUs) > 0 && gs.PodGPUs[i].GPUs > 0:
		return GPUClaim(name, gs.PodGPUs[i].GPUs)
	case len(gs.PodGPUs) > 0:
		return nil
	case len(gs.FirstAvailable) > 0:
		return FirstAvailableClaim(name, gs.FirstAvailable...)
	case gs.GPUsPerPod > 0:
		return GPUClaim(name, gs.GPUsPerPod)
	}
	return nil
}

// podClaims are pod i's claims: GPUs (gpuClaim) and NICs (NICsPerPod).
func (gs GangSpec) podClaims(i int, pod string) []*resourceapi.ResourceClaim {
	gpu := gs.gpuClaim(i, pod+"-gpu")
	if gs.NICsPerPod <= 0 {
		if gpu == nil {
			return nil
		}
		return []*resourceapi.ResourceClaim{gpu}
	}
	if gpu == nil || gs.SeparateNICClaim || len(gpu.Spec.Devices.Constraints) > 0 {
		out := []*resourceapi.ResourceClaim{NICClaim(pod+"-nic", gs.NICsPerPod)}
		if gpu != nil {
			out = append([]*resourceapi.ResourceClaim{gpu}, out...)
		}
		return out
	}
	gpu.Spec.Devices.Requests = append(gpu.Spec.Devices.Requests, NICRequest("nics", gs.NICsPerPod))
	return []*resourceapi.ResourceClaim{gpu}
}

// podCount is how many pods a gang spec has.
func (gs GangSpec) podCount() int {
	if len(gs.PodGPUs) > 0 {
		return len(gs.PodGPUs)
	}
	return gs.Pods
}

// Built is a scenario as API objects.
type Built struct {
	Config placement.Config
	Input  index.SnapshotInput
	Gangs  []*placement.Gang
}

func orDefault(v, def string) string {
	if v == "" {
		return def
	}
	return v
}

// Build turns a scenario into objects and gangs (via placement.NewGang).
func Build(s Scenario) (*Built, error) {
	b := &Built{Config: placement.Config{Index: index.Config{Tree: topology.TreeConfig{LabelLevels: s.Levels}}, Spares: s.Spares}}
	b.Input.DeviceClasses = DeviceClasses()
	for _, d := range s.Domains {
		b.addDomain(d)
	}
	for i, l := range s.Load {
		name := fmt.Sprintf("load-%02d", i)
		pod := BoundPod(name, l.Node, orDefault(l.CPU, "1"), orDefault(l.Memory, "1Gi"))
		b.Input.Pods = append(b.Input.Pods, pod)
		var devs []string
		for _, g := range l.GPUs {
			devs = append(devs, topology.GPUDeviceName(g))
		}
		for _, n := range l.NICs {
			devs = append(devs, NICName(n))
		}
		if len(devs) > 0 {
			b.Input.ResourceClaims = append(b.Input.ResourceClaims, AllocatedClaim(name, l.Node, devs...))
		}
	}
	claims := map[string]*resourceapi.ResourceClaim{}
	for _, c := range b.Input.ResourceClaims {
		claims[c.Name] = c
	}
	for _, gs := range s.Gangs {
		g, err := buildGang(gs, claims)
		if err != nil {
			return nil, err
		}
		b.Gangs = append(b.Gangs, g)
	}
	return b, nil
}

func (b *Built) addDomain(d DomainSpec) {
	var names []string
	for i := range d.Nodes {
		name := NodeName(d.ID, i)
		names = append(names, name)
		labels := map[string]string{}
		for k, v := range d.Labels {
			labels[k] = v
		}
		for k, v := range d.NodeLabels[i] {
			labels[k] = v
		}
		n := Node(name, orDefault(d.CPU, "64"), orDefault(d.Memory, "512Gi"), labels)
		n.Spec.Taints = d.Taints
		b.Input.Nodes = append(b.Input.Nodes, n)
		domain, kind := d.ID, topology.DomainKindMNNVL
		if d.Kind == string(topology.DomainKindNVSwitch) {
			domain, kind = topology.NodeDomainID(topology.DomainKindNVSwitch, name), topology.DomainKindNVSwitch
		}
		rails := d.Rails
		if r, ok := d.NodeRails[i]; ok {
			rails = r
		}
		gpus := make([]GPU, d.GPUsPerNode)
		for g := range gpus {
			rail := int64(g)
			if g < len(rails) {
				rail = rails[g]
			}
			gpus[g] = GPU{NVLinkDomain: domain, Kind: kind, Rail: rail}
			if g < len(d.NUMA) {
				gpus[g].NUMA = ptrTo(d.NUMA[g])
			}
			if slices.Contains(d.TaintedNodes, i) {
				gpus[g].Taint = d.DeviceTaint
			}
		}
		b.Input.ResourceSlices = append(b.Input.ResourceSlices, NodeSlice(name, gpus, d.nics(i)))
	}
	if d.Channels > 0 && d.Kind != string(topology.DomainKindNVSwitch) {
		b.Input.ResourceSlices = append(b.Input.ResourceSlices, FabricDomainSlice(d.ID, names, d.Channels))
	}
}

// nics are the NICs of node i.
func (d DomainSpec) nics(i int) []NIC {
	rails := d.NICRails
	if r, ok := d.NodeNICRails[i]; ok {
		rails = r
	}
	out := make([]NIC, d.NICsPerNode)
	for n := range out {
		out[n].Rail = int64(n)
		if n < len(rails) {
			out[n].Rail = rails[n]
		}
		if slices.Contains(d.TaintedNICs, n) {
			out[n].Taint = d.NICTaint
		}
	}
	return out
}

// BuildGang builds one gang of a spec on its own, with the claims it
// creates (sorted by name), for tests that place many gangs over time.
func BuildGang(gs GangSpec) (*placement.Gang, []*resourceapi.ResourceClaim, error) {
	claims := map[string]*resourceapi.ResourceClaim{}
	g, err := buildGang(gs, claims)
	out := make([]*resourceapi.ResourceClaim, 0, len(claims))
	for _, name := range slices.Sorted(maps.Keys(claims)) {
		out = append(out, claims[name])
	}
	return g, out, err
}

func buildGang(gs GangSpec, claims map[string]*resourceapi.ResourceClaim) (*placement.Gang, error) {
	pg := &schedulingv1beta1.PodGroup{
		ObjectMeta: metav1.ObjectMeta{Namespace: Namespace, Name: gs.Name, UID: uid("podgroup", gs.Name), Annotations: map[string]string{}},
		Spec: schedulingv1beta1.PodGroupSpec{SchedulingPolicy: schedulingv1beta1.PodGroupSchedulingPolicy{
			Gang: &schedulingv1beta1.GangSchedulingPolicy{MinCount: int32(cmp.Or(gs.MinCount, gs.podCount()))},
		}},
	}
	if gs.TopologyKey != "" {
		pg.Spec.SchedulingConstraints = &schedulingv1beta1.PodGroupSchedulingConstraints{Topology: []schedulingv1beta1.TopologyConstraint{{Key: gs.TopologyKey}}}
	}
	if gs.PreferredTopologyKey != "" {
		pg.Annotations[topology.AnnotationPreferredTopologyKey] = gs.PreferredTopologyKey
	}
	if gs.RailAlignment != "" {
		pg.Annotations[topology.AnnotationRailAlignment] = gs.RailAlignment
	}
	if gs.TopologySpread != "" {
		pg.Annotations[topology.AnnotationTopologySpread] = gs.TopologySpread
	}
	if gs.SegmentSize != 0 {
		pg.Annotations[topology.AnnotationSegmentSize] = fmt.Sprint(gs.SegmentSize)
	}
	if gs.SegmentTopologyKey != "" {
		pg.Annotations[topology.AnnotationSegmentTopologyKey] = gs.SegmentTopologyKey
	}
	var shared []string
	if gs.FabricClaim {
		name := gs.Name + "-fabric"
		claims[name] = Claim(name, topology.FabricDomainDeviceClass, 1)
		pg.Spec.ResourceClaims = append(pg.Spec.ResourceClaims, schedulingv1beta1.PodGroupResourceClaim{Name: "fabric", ResourceClaimName: ptrTo(name)})
		shared = append(shared, name)
	}
	var pods []*v1.Pod
	for i := range gs.podCount() {
		name := fmt.Sprintf("%s-%02d", gs.Name, i)
		use := append([]string(nil), shared...)
		for _, c := range gs.podClaims(i, name) {
			claims[c.Name] = c
			use = append(use, c.Name)
		}
		pods = append(pods, gs.pod(name, use))
	}
	g, err := placement.NewGang(pg, pods, func(ns, name string) (*resourceapi.ResourceClaim, error) {
		if c := claims[name]; c != nil {
			return c, nil
		}
		return nil, fmt.Errorf("claim %s/%s not found", ns, name)
	})
	if g == nil {
		return nil, err
	}
	g.BoundNodes, g.PreviousNodes = gs.BoundNodes, gs.PreviousNodes
	for i, node := range gs.Running {
		p := gs.pod(fmt.Sprintf("%s-%02d", gs.Name, gs.podCount()+i), nil)
		p.Spec.NodeName = node
		g.Running = append(g.Running, p)
		if !slices.Contains(g.BoundNodes, node) {
			g.BoundNodes = append(g.BoundNodes, node)
		}
	}
	if len(gs.VolumeNodes) > 0 {
		pin := &v1.NodeSelector{NodeSelectorTerms: []v1.NodeSelectorTerm{{MatchExpressions: []v1.NodeSelectorRequirement{
			{Key: v1.LabelHostname, Operator: v1.NodeSelectorOpIn, Values: gs.VolumeNodes},
		}}}}
		for i := range g.Members {
			g.Members[i].VolumePins = []*v1.NodeSelector{pin}
		}
	}
	return g, err
}

// SortedNodes returns node names of the input, sorted.
func SortedNodes(in index.SnapshotInput) []string {
	out := make([]string, len(in.Nodes))
	for i, n := range in.Nodes {
		out[i] = n.Name
	}
	sort.Strings(out)
	return out
}

// HGXScenario is an HGX-style cluster for benchmarks: nodes with 8 GPUs
// (each its own NVSwitch domain, rail = GPU index), 16 nodes per rack, 8
// racks per IB leaf, 8 leaves per spine (levels rack, leaf, spine). Every
// node has a uniformly random number of busy GPUs (0..8, 50% on average)
// and a 4-cpu pod.
func HGXScenario(nodes int, seed uint64) Scenario {
	r := rand.New(rand.NewPCG(seed, 7))
	sc := Scenario{Levels: []string{"rack", "leaf", "spine"}}
	for rack := 0; rack*16 < nodes; rack++ {
		id := fmt.Sprintf("r%03d", rack)
		sc.Domains = append(sc.Domains, DomainSpec{
			ID: id, Kind: string(topology.DomainKindNVSwitch), Nodes: min(16, nodes-rack*16), GPUsPerNode: 8, CPU: "128", Memory: "2Ti",
			Labels: map[string]string{"rack": id, "leaf": fmt.Sprintf("l%02d", rack/8), "spine": fmt.Sprintf("s%d", rack/64)},
		})
		for i := range min(16, nodes-rack*16) {
			busy := r.Perm(8)[:r.IntN(9)]
			slices.Sort(busy)
			sc.Load = append(sc.Load, LoadSpec{Node: NodeName(id, i), GPUs: busy, CPU: "4"})
		}
	}
	return sc
}
