package index

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sort"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"

	"github.com/gpufabric/gpufabric/pkg/topology"
)

// Config tunes the snapshots. The zero value is usable.
type Config struct {
	// Tree configures the fabric levels above the NVLink domain.
	Tree topology.TreeConfig
	// Features for the structured allocator. The zero value means
	// DefaultFeatures().
	Features *structured.Features
	// AllocateTimeout bounds one Allocate call; a call that runs out counts
	// as "does not fit on this node". Default 100ms.
	AllocateTimeout time.Duration
	// MatchCache, when set, keeps CEL class matches of unchanged slices
	// from one snapshot to the next.
	MatchCache *MatchCache
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

// Snapshot is one immutable view of the cluster plus the caches filled
// while gangs are placed on it. Assume adds a placement to it.
type Snapshot struct {
	cfg    Config
	tree   *topology.Tree
	nodes  []*NodeState // sorted by name
	byName map[string]*NodeState
	match  *matcher
	// cluster-level slices (no spec.nodeName), sorted by name.
	clusterSlices []*clusterSlice
	// allocated devices of pools that are not node-local, by pool.
	clusterAllocated map[poolID][]structured.DeviceID
	// poolNode maps a node-local pool to its node.
	poolNode map[poolID]*NodeState
	levels   *levels
	warnings []string
	// holder: who holds an allocated device of a cluster-level pool
	// (namespace/consumer), for explanations.
	holder map[structured.DeviceID]string
	// anti: the bound pods' required anti-affinity terms.
	anti antiIndex
	// touched: nodes Assume changed, globalTouched: Assume changed
	// cluster-level allocations or anti-affinity terms; Cache.Update
	// re-reads them from the cache.
	touched       map[string]bool
	globalTouched bool
	// allocatorKey: AllocatorKey, computed on first use.
	allocatorKey string
	// undo: what each Assume changed since the oldest open mark (marks
	// open), for Rollback (rollback.go).
	undo  []*assumed
	marks int
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
	if cfg.MatchCache != nil {
		cfg.MatchCache.rotate()
	}
	tree, err := topology.BuildTree(cfg.Tree, in.Nodes, in.ResourceSlices)
	if err != nil {
		return nil, fmt.Errorf("build fabric tree: %w", err)
	}
	s := &Snapshot{
		cfg:    cfg,
		tree:   tree,
		byName: make(map[string]*NodeState, len(in.Nodes)),
		match: &matcher{
			classes: newClassLister(in.DeviceClasses),
			cel:     cel.NewCache(100, cel.Features{EnableConsumableCapacity: cfg.Features.ConsumableCapacity, EnableListTypeAttributes: cfg.Features.ListTypeAttributes}),
			cache:   cfg.MatchCache,
		},
		clusterAllocated: map[poolID][]structured.DeviceID{},
		poolNode:         map[poolID]*NodeState{},
		levels:           newLevels(tree, in.Nodes),
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
// tree's warnings, slices with invalid node selectors, anti-affinity terms
// that do not compile), for logs.
func (s *Snapshot) Warnings() []string {
	return append(append(append([]string(nil), s.tree.Warnings...), s.warnings...), s.anti.warnings...)
}

// Tree returns the fabric tree of the snapshot.
func (s *Snapshot) Tree() *topology.Tree { return s.tree }

// Nodes returns every node, sorted by name; NodeState.Index is the
// position. Callers must not modify the slice.
func (s *Snapshot) Nodes() []*NodeState { return s.nodes }

// Node returns the node of that name, or nil.
func (s *Snapshot) Node(name string) *NodeState { return s.byName[name] }

// LevelsFor returns the levels a gang with topology key key and preferred
// key preferred (either may be "") is tried at, in order (levels.go).
func (s *Snapshot) LevelsFor(key, preferred string) []*topology.Level {
	return s.levels.forKeys(key, preferred)
}

// Level returns the tree level for a key, or a level grouped by that node
// label (Index -1), made once per snapshot.
func (s *Snapshot) Level(key string) *topology.Level { return s.levels.level(key) }

// LevelIndex returns the level's domains by free devices of the class,
// built on first use (levels.go). With class "" every domain has 0 free.
func (s *Snapshot) LevelIndex(ctx context.Context, l *topology.Level, class string) (*LevelIndex, error) {
	return s.levels.index(ctx, l, class, s)
}

// Warm does ahead of time the work the first gang placed on a new snapshot
// would otherwise pay: for each named class, the class's matches of every
// node-local device (CEL, kept in the MatchCache when there is one) and the
// free-device index of every level of the fabric tree. Snapshots Cache.Update
// derives from this one keep both, so warming once after the informers sync
// takes that cost out of the first gang's placement (0.3-1.3 s at 5,000
// nodes, docs/benchmarks.md).
//
// Rules: it costs in proportion to the cluster's devices per class and
// changes no decision (placement builds the same indexes on first use);
// classes the snapshot does not have are skipped; it checks ctx between
// classes and levels and, once ctx is done, returns the classes warmed whole
// so far with ctx's error. Idempotent. Not safe for concurrent use, like the
// Snapshot.
func (s *Snapshot) Warm(ctx context.Context, classes []string) (int, error) {
	return s.levels.warm(ctx, classes, s.match.classes, s)
}

// LevelIndexes reports how many level indexes (level × class) the snapshot
// holds: each is built on first use, by placement or Warm.
func (s *Snapshot) LevelIndexes() int { return len(s.levels.built) }

// HasAntiTerms reports whether a bound pod has a required anti-affinity
// term the snapshot indexed.
func (s *Snapshot) HasAntiTerms() bool { return len(s.anti.byKey) > 0 }

// ConflictsWithBound reports whether pod p, with its required
// anti-affinity terms, conflicts on node ns with a pod bound there or
// nearby: p's terms against the bound pods in the same topology domain,
// and every bound pod's terms against p (anti.go).
func (s *Snapshot) ConflictsWithBound(p *v1.Pod, terms []*AntiTerm, ns *NodeState) bool {
	return s.anti.conflicts(p, terms, ns, s.nodes)
}

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
		ns.addPod(PodRequests(p))
		ns.boundPods = append(ns.boundPods, p)
		s.anti.add(p, ns.node)
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

// AllocatorKey names what Allocate's answers depend on besides the node,
// the claims and the devices in use: the DeviceClasses (their specs), the
// allocator's features and Config.AllocateTimeout. A memory of answers
// (pkg/gang/placement/cost) is only good for snapshots with the same key.
// Computed once per snapshot.
func (s *Snapshot) AllocatorKey() (string, error) {
	if s.allocatorKey != "" {
		return s.allocatorKey, nil
	}
	h := sha256.New()
	fmt.Fprintf(h, "timeout %d\nfeatures %+v\n", s.cfg.AllocateTimeout, *s.cfg.Features)
	for _, c := range s.match.classes.sorted {
		raw, err := json.Marshal(c.Spec)
		if err != nil {
			return "", fmt.Errorf("device class %s: %w", c.Name, err)
		}
		fmt.Fprintf(h, "class %s %s\n", c.Name, raw)
	}
	s.allocatorKey = hex.EncodeToString(h.Sum(nil)[:16])
	return s.allocatorKey, nil
}
