package index

import (
	"context"
	"maps"
	"sort"
	"strconv"
	"sync"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/structured"
)

// Cache keeps the objects snapshots are built from, fed one event at a
// time (informer handlers), so that Update can bring a snapshot up to date
// in proportion to what changed instead of re-indexing the cluster.
//
// Rules: changes to what the fabric tree or the device index are built
// from (a node added, deleted or relabelled, any ResourceSlice or
// DeviceClass change) make the next Update rebuild the snapshot whole;
// everything else (bound pods, claim allocations, a node's status, taints
// or allocatable) marks only the nodes it concerns, which Update re-reads.
// The Cache copies no API objects: callers must not modify them. Safe for
// concurrent use; Update serves one lineage of snapshots (the one it
// returned last), a snapshot from elsewhere is rebuilt whole.
type Cache struct {
	mu      sync.Mutex
	cfg     Config
	nodes   map[string]*cacheNode
	cluster map[string]*resourceapi.ResourceSlice // slices without a node, by name
	classes map[string]*resourceapi.DeviceClass
	// pods: bound, not terminated, by UID; claims: allocated, by UID.
	pods   map[types.UID]*v1.Pod
	claims map[types.UID]*resourceapi.ResourceClaim
	// pools: per pool, how many allocated claims hold each device.
	pools map[poolID]map[structured.DeviceID]int
	// poolNodes: the nodes whose slices publish a pool.
	poolNodes map[poolID]map[string]int
	// sliceNode: each node-local slice's node, by slice name.
	sliceNode map[string]string
	// anti: bound pods with required pod anti-affinity.
	anti map[types.UID]*v1.Pod
	// seen: the resourceVersion of every pod and claim the cache has been
	// given, by UID, until it is deleted.
	seen map[types.UID]string
	// clusterClaims: allocated claims with a device of a pool no node's
	// slice publishes (cluster-level, or not published yet).
	clusterClaims map[types.UID]*resourceapi.ResourceClaim
	// gpus: the published GPUs by NVLink domain, for FreeGPUs.
	gpus gpuIndex

	rebuild bool                // the next Update rebuilds whole
	changed map[string]struct{} // nodes to re-read
	global  bool                // cluster-level allocations or anti pods changed
	last    *Snapshot
}

type cacheNode struct {
	node   *v1.Node // nil while only pods or slices name the node
	slices map[string]*resourceapi.ResourceSlice
	pods   map[types.UID]*v1.Pod
}

// NewCache returns an empty cache whose snapshots use cfg.
func NewCache(cfg Config) *Cache {
	return &Cache{
		cfg:           cfg,
		nodes:         map[string]*cacheNode{},
		cluster:       map[string]*resourceapi.ResourceSlice{},
		classes:       map[string]*resourceapi.DeviceClass{},
		pods:          map[types.UID]*v1.Pod{},
		claims:        map[types.UID]*resourceapi.ResourceClaim{},
		pools:         map[poolID]map[structured.DeviceID]int{},
		poolNodes:     map[poolID]map[string]int{},
		sliceNode:     map[string]string{},
		seen:          map[types.UID]string{},
		anti:          map[types.UID]*v1.Pod{},
		rebuild:       true,
		clusterClaims: map[types.UID]*resourceapi.ResourceClaim{},
		changed:       map[string]struct{}{},
	}
}

func (c *Cache) node(name string) *cacheNode {
	cn := c.nodes[name]
	if cn == nil {
		cn = &cacheNode{slices: map[string]*resourceapi.ResourceSlice{}, pods: map[types.UID]*v1.Pod{}}
		c.nodes[name] = cn
	}
	return cn
}

func (c *Cache) touch(name string) { c.changed[name] = struct{}{} }

// SetNode adds or updates a node.
func (c *Cache) SetNode(n *v1.Node) {
	c.mu.Lock()
	defer c.mu.Unlock()
	cn := c.node(n.Name)
	if cn.node == nil || !maps.Equal(cn.node.Labels, n.Labels) {
		c.rebuild = true
	}
	cn.node = n
	c.touch(n.Name)
}

// DeleteNode removes a node; its pods and slices stay until they go.
func (c *Cache) DeleteNode(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cn := c.nodes[name]; cn != nil && cn.node != nil {
		cn.node = nil
		c.rebuild = true
		c.dropIfEmpty(name)
	}
}

func (c *Cache) dropIfEmpty(name string) {
	if cn := c.nodes[name]; cn != nil && cn.node == nil && len(cn.slices) == 0 && len(cn.pods) == 0 {
		delete(c.nodes, name)
	}
}

// SetSlice adds or updates a ResourceSlice.
func (c *Cache) SetSlice(sl *resourceapi.ResourceSlice) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.noteSlice(sl.Name, sl)
	c.deleteSlice(sl.Name)
	c.rebuild = true
	if n := sliceNodeName(sl); n != "" {
		c.node(n).slices[sl.Name] = sl
		c.sliceNode[sl.Name] = n
		pid := poolID{sl.Spec.Driver, sl.Spec.Pool.Name}
		if c.poolNodes[pid] == nil {
			c.poolNodes[pid] = map[string]int{}
		}
		c.poolNodes[pid][n]++
		return
	}
	c.cluster[sl.Name] = sl
}

// DeleteSlice removes a ResourceSlice.
func (c *Cache) DeleteSlice(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.noteSlice(name, nil)
	c.deleteSlice(name)
	c.rebuild = true
}

func (c *Cache) deleteSlice(name string) {
	if _, ok := c.cluster[name]; ok {
		delete(c.cluster, name)
		return
	}
	n, ok := c.sliceNode[name]
	if !ok {
		return
	}
	delete(c.sliceNode, name)
	if cn := c.nodes[n]; cn != nil {
		sl := cn.slices[name]
		delete(cn.slices, name)
		pid := poolID{sl.Spec.Driver, sl.Spec.Pool.Name}
		if c.poolNodes[pid][n]--; c.poolNodes[pid][n] <= 0 {
			delete(c.poolNodes[pid], n)
			if len(c.poolNodes[pid]) == 0 {
				delete(c.poolNodes, pid)
			}
		}
		c.dropIfEmpty(n)
	}
}

func sliceNodeName(sl *resourceapi.ResourceSlice) string {
	if sl.Spec.NodeName != nil {
		return *sl.Spec.NodeName
	}
	return ""
}

// SetClass adds or updates a DeviceClass.
func (c *Cache) SetClass(dc *resourceapi.DeviceClass) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.classes[dc.Name] = dc
	c.rebuild = true
}

// DeleteClass removes a DeviceClass.
func (c *Cache) DeleteClass(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.classes, name)
	c.rebuild = true
}

// SetPod adds or updates a pod. Only bound pods that have not terminated
// use node resources; any other pod is removed.
func (c *Cache) SetPod(p *v1.Pod) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.deletePod(p.UID)
	c.seen[p.UID] = p.ResourceVersion
	if p.Spec.NodeName == "" || p.Status.Phase == v1.PodSucceeded || p.Status.Phase == v1.PodFailed {
		return
	}
	c.pods[p.UID] = p
	c.node(p.Spec.NodeName).pods[p.UID] = p
	c.touch(p.Spec.NodeName)
	if hasAntiAffinity(p) {
		c.anti[p.UID] = p
		c.global = true
	}
}

// DeletePod removes a pod.
func (c *Cache) DeletePod(uid types.UID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.deletePod(uid)
	delete(c.seen, uid)
}

func (c *Cache) deletePod(uid types.UID) {
	p := c.pods[uid]
	if p == nil {
		return
	}
	delete(c.pods, uid)
	delete(c.nodes[p.Spec.NodeName].pods, uid)
	c.touch(p.Spec.NodeName)
	c.dropIfEmpty(p.Spec.NodeName)
	if _, ok := c.anti[uid]; ok {
		delete(c.anti, uid)
		c.global = true
	}
}

// SetClaim adds or updates a ResourceClaim. Only allocated claims matter;
// any other is removed.
func (c *Cache) SetClaim(rc *resourceapi.ResourceClaim) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.deleteClaim(rc.UID)
	c.seen[rc.UID] = rc.ResourceVersion
	if rc.Status.Allocation == nil {
		return
	}
	c.claims[rc.UID] = rc
	if c.countDevices(rc, 1) {
		c.clusterClaims[rc.UID] = rc
	}
}

// DeleteClaim removes a ResourceClaim.
func (c *Cache) DeleteClaim(uid types.UID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.deleteClaim(uid)
	delete(c.seen, uid)
}

// Caught reports whether the cache has been given the pod or claim with
// this UID at resourceVersion rv or later. Informers update their stores
// before they call handlers, so a lister can be ahead of the cache; callers
// that judge from a lister that a write is visible check the cache caught
// up too. resourceVersions compare as numbers (etcd revisions); an
// unparsable one is reached only by the same string.
func (c *Cache) Caught(uid types.UID, rv string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	have, ok := c.seen[uid]
	return ok && (have == rv || reachedRV(have, rv))
}

func reachedRV(have, want string) bool {
	h, err1 := strconv.ParseUint(have, 10, 64)
	w, err2 := strconv.ParseUint(want, 10, 64)
	return err1 == nil && err2 == nil && h >= w
}

func (c *Cache) deleteClaim(uid types.UID) {
	if rc := c.claims[uid]; rc != nil {
		delete(c.claims, uid)
		delete(c.clusterClaims, uid)
		c.countDevices(rc, -1)
	}
}

// countDevices adds delta to the holders of each device of the claim's
// allocation (admin access takes nothing) and marks who sees them. It
// reports whether the claim has a device of a pool no node publishes.
func (c *Cache) countDevices(rc *resourceapi.ResourceClaim, delta int) bool {
	cluster := false
	for _, r := range rc.Status.Allocation.Devices.Results {
		pid := poolID{r.Driver, r.Pool}
		nodes := c.poolNodes[pid]
		for n := range nodes {
			c.touch(n)
		}
		if len(nodes) == 0 {
			c.global, cluster = true, true // a cluster-level pool, or one no slice publishes yet
		}
		if r.AdminAccess != nil && *r.AdminAccess {
			continue
		}
		devs := c.pools[pid]
		if devs == nil {
			devs = map[structured.DeviceID]int{}
			c.pools[pid] = devs
		}
		id := structured.MakeDeviceID(r.Driver, r.Pool, r.Device)
		if devs[id] += delta; devs[id] == 1 && delta > 0 {
			c.holdGPU(id, 1)
		} else if devs[id] <= 0 {
			c.holdGPU(id, -1)
			delete(devs, id)
			if len(devs) == 0 {
				delete(c.pools, pid)
			}
		}
	}
	return cluster
}

// Input lists the cache's objects as a SnapshotInput (nodes and slices by
// name; pods and claims in no particular order).
func (c *Cache) Input() SnapshotInput {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.input()
}

func (c *Cache) input() SnapshotInput {
	var in SnapshotInput
	for _, cn := range c.nodes {
		if cn.node != nil {
			in.Nodes = append(in.Nodes, cn.node)
		}
		for _, sl := range cn.slices {
			in.ResourceSlices = append(in.ResourceSlices, sl)
		}
	}
	sort.Slice(in.Nodes, func(i, j int) bool { return in.Nodes[i].Name < in.Nodes[j].Name })
	for _, sl := range c.cluster {
		in.ResourceSlices = append(in.ResourceSlices, sl)
	}
	sort.Slice(in.ResourceSlices, func(i, j int) bool { return in.ResourceSlices[i].Name < in.ResourceSlices[j].Name })
	for _, dc := range c.classes {
		in.DeviceClasses = append(in.DeviceClasses, dc)
	}
	for _, p := range c.pods {
		in.Pods = append(in.Pods, p)
	}
	for _, rc := range c.claims {
		in.ResourceClaims = append(in.ResourceClaims, rc)
	}
	return in
}

// Update returns a snapshot of the cache's state. Given the snapshot it
// returned last, it brings that one up to date: the nodes that changed
// since, and those Assume touched, are re-read (their level index entries
// moved), cluster-level allocations and anti-affinity terms re-indexed when
// they changed; the fabric tree, device index and level indexes are kept.
// Otherwise, or when the fabric changed, it builds a new snapshot.
func (c *Cache) Update(ctx context.Context, prev *Snapshot) (*Snapshot, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.rebuild || prev == nil || prev != c.last {
		snap, err := NewSnapshot(ctx, c.cfg, c.input())
		if err != nil {
			return nil, err
		}
		c.rebuild, c.global, c.last = false, false, snap
		clear(c.changed)
		c.classifyClaims()
		return snap, nil
	}
	s := prev
	for name := range s.touched {
		c.touch(name)
	}
	clear(s.touched)
	names := make([]string, 0, len(c.changed))
	for n := range c.changed {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		cn := c.nodes[n]
		if cn == nil || cn.node == nil || s.byName[n] == nil {
			continue // a node deleted or added makes the next Update rebuild
		}
		if err := s.refreshNode(ctx, cn, c.pools); err != nil {
			return nil, err
		}
	}
	clear(c.changed)
	if c.global || s.globalTouched {
		s.reindexGlobal(c.clusterClaims, c.anti)
		c.global, s.globalTouched = false, false
	}
	return s, nil
}

// classifyClaims recomputes clusterClaims after slices changed.
func (c *Cache) classifyClaims() {
	clear(c.clusterClaims)
	for uid, rc := range c.claims {
		for _, r := range rc.Status.Allocation.Devices.Results {
			if len(c.poolNodes[poolID{r.Driver, r.Pool}]) == 0 {
				c.clusterClaims[uid] = rc
				break
			}
		}
	}
}
