package placement

import (
	"context"
	"fmt"
	"sort"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"

	"github.com/gpufabric/gpufabric/pkg/topology"
)

// Config tunes the engine. The zero value is usable.
type Config struct {
	// Tree configures the fabric levels above the NVLink domain.
	Tree topology.TreeConfig
	// Features for the structured allocator. The zero value means
	// DefaultFeatures().
	Features *structured.Features
	// AllocateTimeout bounds one Allocate call; a call that runs out counts
	// as "does not fit on this node". Default 100ms.
	AllocateTimeout time.Duration
	// CompareDomains is how many domains with the same leftover the engine
	// verifies to compare rail alignment before it picks one. Default 4.
	CompareDomains int
	// MatchCache, when set, keeps CEL class matches of unchanged slices
	// from one snapshot to the next.
	MatchCache *MatchCache
	// MaxSharedAnchors bounds how many nodes of one domain are tried as the
	// anchor for the gang's shared claims. Default 16.
	MaxSharedAnchors int
	// PackOrder is how a domain's nodes are taken (packorder.go). Default
	// PackLeastSpread.
	PackOrder PackOrder
}

// DefaultFeatures are the allocator features of Kubernetes 1.37 with default
// gates: the GA DRA features (admin access, prioritized list, partitionable
// devices, device taints). DRAWorkloadResourceClaims and GenericWorkload do
// not change the allocator.
func DefaultFeatures() structured.Features {
	return structured.Features{
		AdminAccess:          true,
		PrioritizedList:      true,
		PartitionableDevices: true,
		DeviceTaints:         true,
	}
}

func (c Config) withDefaults() Config {
	if c.Features == nil {
		f := DefaultFeatures()
		c.Features = &f
	}
	if c.AllocateTimeout <= 0 {
		c.AllocateTimeout = 100 * time.Millisecond
	}
	if c.CompareDomains <= 0 {
		c.CompareDomains = 4
	}
	if c.MaxSharedAnchors <= 0 {
		c.MaxSharedAnchors = 16
	}
	if c.PackOrder == "" {
		c.PackOrder = PackLeastSpread
	}
	return c
}

// SnapshotInput is what the scheduler's informers hold, as plain objects.
type SnapshotInput struct {
	Nodes []*v1.Node
	// Pods that use node resources: every pod with spec.nodeName set that
	// has not terminated. Others are ignored.
	Pods           []*v1.Pod
	ResourceSlices []*resourceapi.ResourceSlice
	DeviceClasses  []*resourceapi.DeviceClass
	// ResourceClaims: allocated ones mark their devices in use; the rest
	// are ignored.
	ResourceClaims []*resourceapi.ResourceClaim
}

// Snapshot is one immutable view of the cluster plus the caches the engine
// fills while placing gangs on it. Assume adds a decision to it.
type Snapshot struct {
	cfg      Config
	tree     *topology.Tree
	nodes    []*nodeState // sorted by name
	byName   map[string]*nodeState
	classes  classLister
	trimmed  trimmedClasses
	celCache *cel.Cache
	// cluster-level slices (no spec.nodeName), sorted by name.
	clusterSlices []*clusterSlice
	// allocated devices of pools that are not node-local, by pool.
	clusterAllocated map[poolID][]structured.DeviceID
	// poolNode maps a node-local pool to its node.
	poolNode map[poolID]*nodeState
	levels   map[string]*levelIndex
	adHoc    map[string]*topology.Level
	allNodes []*v1.Node
	warnings []string
	// holder: who holds an allocated device of a cluster-level pool
	// (namespace/consumer), for explanations.
	holder map[structured.DeviceID]string
	// antiIndex: the bound pods' required anti-affinity terms, by topology
	// key and label value of their node; antiWarnings: terms it ignored.
	antiIndex    map[string]map[string][]*antiTerm
	antiWarnings []string
	// touched: nodes Assume changed, globalTouched: Assume changed
	// cluster-level allocations or anti-affinity terms; Cache.Update
	// re-reads them from the cache.
	touched       map[string]bool
	globalTouched bool
	// greedyOnly turns the search (search.go) off, for tests that measure
	// what it adds (GreedyOnly in export_test.go).
	greedyOnly bool
	// oldRails: rail alignment as before the search over rail sets (the
	// four most used sets of the first fill, no NICs following their
	// GPUs), for comparisons (OldRails in export_test.go).
	oldRails bool
}

type poolID struct{ driver, pool string }

// clusterSlice is a slice whose pool is not node-local.
type clusterSlice struct {
	slice    *resourceapi.ResourceSlice
	selector *nodeaffinity.NodeSelector            // nil: all nodes or per-device
	classes  map[string]bool                       // class name → has a matching device
	trimmed  map[string]*resourceapi.ResourceSlice // class → slice with only its devices
}

// NewSnapshot indexes the input. It copies no API objects; callers must not
// modify them while the snapshot is in use.
func NewSnapshot(ctx context.Context, cfg Config, in SnapshotInput) (*Snapshot, error) {
	cfg = cfg.withDefaults()
	if _, err := ParsePackOrder(string(cfg.PackOrder)); err != nil {
		return nil, err
	}
	if cfg.MatchCache != nil {
		cfg.MatchCache.rotate()
	}
	tree, err := topology.BuildTree(cfg.Tree, in.Nodes, in.ResourceSlices)
	if err != nil {
		return nil, fmt.Errorf("build fabric tree: %w", err)
	}
	s := &Snapshot{
		cfg:              cfg,
		tree:             tree,
		byName:           make(map[string]*nodeState, len(in.Nodes)),
		classes:          newClassLister(in.DeviceClasses),
		celCache:         cel.NewCache(100, cel.Features{EnableConsumableCapacity: cfg.Features.ConsumableCapacity, EnableListTypeAttributes: cfg.Features.ListTypeAttributes}),
		clusterAllocated: map[poolID][]structured.DeviceID{},
		poolNode:         map[poolID]*nodeState{},
		levels:           map[string]*levelIndex{},
		adHoc:            map[string]*topology.Level{},
		allNodes:         in.Nodes,
		touched:          map[string]bool{},
	}
	for _, n := range in.Nodes {
		ns := newNodeState(n)
		s.nodes = append(s.nodes, ns)
		s.byName[n.Name] = ns
	}
	sort.Slice(s.nodes, func(i, j int) bool { return s.nodes[i].node.Name < s.nodes[j].node.Name })
	for i, ns := range s.nodes {
		ns.idx = i
	}
	s.indexSlices(in.ResourceSlices)
	s.indexPods(in.Pods)
	s.indexClaims(in.ResourceClaims)
	return s, nil
}

// Warnings lists what the snapshot ignored or found inconsistent (the
// tree's warnings, slices with invalid node selectors), for logs.
func (s *Snapshot) Warnings() []string {
	return append(append(append([]string(nil), s.tree.Warnings...), s.warnings...), s.antiWarnings...)
}

// Tree returns the fabric tree of the snapshot.
func (s *Snapshot) Tree() *topology.Tree { return s.tree }

func (s *Snapshot) indexSlices(all []*resourceapi.ResourceSlice) {
	sorted := append([]*resourceapi.ResourceSlice(nil), all...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Name < sorted[j].Name })
	for _, sl := range sorted {
		if sl.Spec.NodeName != nil && *sl.Spec.NodeName != "" {
			ns := s.byName[*sl.Spec.NodeName]
			if ns == nil {
				continue
			}
			ns.slices = append(ns.slices, sl)
			s.poolNode[poolID{sl.Spec.Driver, sl.Spec.Pool.Name}] = ns
			continue
		}
		cs := &clusterSlice{slice: sl, classes: map[string]bool{}}
		if sl.Spec.NodeSelector != nil {
			sel, err := nodeaffinity.NewNodeSelector(sl.Spec.NodeSelector)
			if err != nil {
				// The allocator would fail on every node that sees it.
				s.warnings = append(s.warnings, fmt.Sprintf("resource slice %s ignored: node selector: %v", sl.Name, err))
				continue
			}
			cs.selector = sel
		}
		s.clusterSlices = append(s.clusterSlices, cs)
	}
}

func (s *Snapshot) indexPods(pods []*v1.Pod) {
	for _, p := range pods {
		if p.Spec.NodeName == "" || p.Status.Phase == v1.PodSucceeded || p.Status.Phase == v1.PodFailed {
			continue
		}
		ns := s.byName[p.Spec.NodeName]
		if ns == nil {
			continue
		}
		ns.addPod(podRequests(p))
		ns.boundPods = append(ns.boundPods, p)
		s.indexAnti(p, ns.node)
	}
}

func (s *Snapshot) indexClaims(claims []*resourceapi.ResourceClaim) {
	for _, c := range claims {
		if c.Status.Allocation == nil {
			continue
		}
		s.markAllocated(c.Status.Allocation)
		s.recordHolders(claimHolder(c), c.Status.Allocation)
	}
}

// markAllocated records the devices of an allocation as in use.
func (s *Snapshot) markAllocated(a *resourceapi.AllocationResult) {
	for _, r := range a.Devices.Results {
		if r.AdminAccess != nil && *r.AdminAccess {
			continue
		}
		id := structured.MakeDeviceID(r.Driver, r.Pool, r.Device)
		pid := poolID{r.Driver, r.Pool}
		if ns := s.poolNode[pid]; ns != nil {
			ns.allocated.Insert(id)
			ns.dirty()
			continue
		}
		s.clusterAllocated[pid] = append(s.clusterAllocated[pid], id)
	}
}

// classLister serves DeviceClasses to the allocator from the snapshot.
type classLister struct {
	byName map[string]*resourceapi.DeviceClass
	sorted []*resourceapi.DeviceClass
}

func newClassLister(classes []*resourceapi.DeviceClass) classLister {
	l := classLister{byName: make(map[string]*resourceapi.DeviceClass, len(classes))}
	for _, c := range classes {
		l.byName[c.Name] = c
		l.sorted = append(l.sorted, c)
	}
	sort.Slice(l.sorted, func(i, j int) bool { return l.sorted[i].Name < l.sorted[j].Name })
	return l
}

func (l classLister) List() ([]*resourceapi.DeviceClass, error) { return l.sorted, nil }

func (l classLister) Get(name string) (*resourceapi.DeviceClass, error) {
	if c := l.byName[name]; c != nil {
		return c, nil
	}
	return nil, fmt.Errorf("device class %s not found", name)
}

// allocatedFor returns the allocated state for one Allocate call on ns with
// the given cluster slices: only devices of pools the call can see, plus
// the gang's in-flight devices.
func (s *Snapshot) allocatedFor(ns *nodeState, cluster []*clusterSlice, inflight map[poolID][]structured.DeviceID) structured.AllocatedState {
	set := sets.New[structured.DeviceID]()
	set = set.Union(ns.allocated)
	seen := map[poolID]bool{}
	add := func(pid poolID) {
		if seen[pid] {
			return
		}
		seen[pid] = true
		set.Insert(s.clusterAllocated[pid]...)
		set.Insert(inflight[pid]...)
	}
	for _, sl := range ns.slices {
		add(poolID{sl.Spec.Driver, sl.Spec.Pool.Name})
	}
	for _, cs := range cluster {
		add(poolID{cs.slice.Spec.Driver, cs.slice.Spec.Pool.Name})
	}
	return structured.AllocatedState{
		AllocatedDevices:         set,
		AllocatedSharedDeviceIDs: sets.New[structured.SharedDeviceID](),
		AggregatedCapacity:       structured.NewConsumedCapacityCollection(),
	}
}
