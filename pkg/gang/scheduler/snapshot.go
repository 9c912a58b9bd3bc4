package scheduler

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	corelisters "k8s.io/client-go/listers/core/v1"
	resourcelisters "k8s.io/client-go/listers/resource/v1"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/klog/v2"

	"github.com/gpufabric/gpufabric/pkg/gang/guard"
	"github.com/gpufabric/gpufabric/pkg/gang/nodetrust"
	"github.com/gpufabric/gpufabric/pkg/gang/placement"
	"github.com/gpufabric/gpufabric/pkg/gang/placement/index"
	"github.com/gpufabric/gpufabric/pkg/gang/podstate"
	"github.com/gpufabric/gpufabric/pkg/gang/preemption"
	"github.com/gpufabric/gpufabric/pkg/topology"
)

// assumed is a decision being committed, or committed, that the informers
// may not show yet.
type assumed struct {
	gang     *placement.Gang
	decision *placement.Decision
	// inFlight: the commit has not returned; written is not known yet.
	inFlight bool
	// written: each written claim's resourceVersion after the commit, by
	// claim UID.
	written map[types.UID]string
}

// assumeCache holds decisions from before their commit starts until the
// informers show all their writes. Rules: an entry is added in flight
// before the commit's first write (so later snapshots count its devices),
// completed when the commit succeeded and dropped when it failed (after its
// undo); a completed entry is dropped once, in the informers, every pod of
// the decision is bound, gone, replaced, terminating or on a node that no
// longer exists, and every claim the commit wrote is gone, replaced, or at
// (or past) the resourceVersion the commit wrote; so a claim deallocated or
// deleted before the informers caught up ends the entry too. An entry in
// flight is never dropped by what the informers show. Safe for concurrent
// use.
type assumeCache struct {
	mu      sync.Mutex
	entries map[string]*assumed
}

func newAssumeCache() *assumeCache { return &assumeCache{entries: map[string]*assumed{}} }

// addInFlight adds a decision whose commit is about to start.
func (a *assumeCache) addInFlight(key string, g *placement.Gang, d *placement.Decision) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.entries[key] = &assumed{gang: g, decision: d, inFlight: true}
}

// complete records that the commit of key's entry succeeded with written.
func (a *assumeCache) complete(key string, written map[types.UID]string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if e := a.entries[key]; e != nil {
		e.inFlight, e.written = false, written
	}
}

// drop removes key's entry (its commit failed and was undone).
func (a *assumeCache) drop(key string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.entries, key)
}

func (a *assumeCache) len() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.entries)
}

// waiting reports whether the gang has an entry the informers do not show
// yet; an entry they show is dropped.
func (a *assumeCache) waiting(key string, visible func(*assumed) bool) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	e := a.entries[key]
	if e != nil && !e.inFlight && visible(e) {
		delete(a.entries, key)
		return false
	}
	return e != nil
}

// pending drops the entries visible says the informers show and returns
// the others.
func (a *assumeCache) pending(visible func(*assumed) bool) []*assumed {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []*assumed
	for key, e := range a.entries {
		if !e.inFlight && visible(e) {
			delete(a.entries, key)
			continue
		}
		out = append(out, e)
	}
	return out
}

// snapshots serves the worker the snapshots it places on: the placement
// cache brought up to date (its feed: cachefeed.go; its warm-up: warm.go),
// or, with Config.RebuildSnapshots (cache nil), snapshots built from the
// listers; each with the assumed decisions added. It counts the free GPUs
// for the metrics loop. snap is used only by the worker (and the warm-up,
// before the worker starts); the assume cache is safe for concurrent use.
type snapshots struct {
	index           index.Config
	recordNamespace string
	metrics         *Metrics
	assumed         *assumeCache
	pods            corelisters.PodLister
	nodes           corelisters.NodeLister
	claims          resourcelisters.ResourceClaimLister
	templates       resourcelisters.ResourceClaimTemplateLister
	slices          resourcelisters.ResourceSliceLister
	classes         resourcelisters.DeviceClassLister
	// cache is fed by the informers (nil with Config.RebuildSnapshots);
	// snap is the snapshot it keeps up to date.
	cache *index.Cache
	snap  *index.Snapshot
	// trust tells refused nodes (those the tree leaves out) once.
	trust *nodetrust.Reporter
}

// visible reports whether the informers show all writes of a commit (see
// assumeCache for the rules), and the placement cache, which the informers
// feed after their listers, caught up with what the listers show.
func (sn *snapshots) visible(e *assumed) bool {
	for _, pp := range e.decision.Pods {
		p, err := sn.pods.Pods(pp.Namespace).Get(pp.Name)
		if err == nil && p.UID == pp.UID && sn.cache != nil && !sn.cache.Caught(p.UID, p.ResourceVersion) {
			return false
		}
		if err != nil || p.UID != pp.UID || p.Spec.NodeName != "" || p.DeletionTimestamp != nil || podstate.Terminated(p) {
			continue
		}
		if _, err := sn.nodes.Get(pp.Node); err == nil {
			return false
		}
	}
	for _, c := range e.decision.Claims {
		rc, err := sn.claims.ResourceClaims(c.Namespace).Get(c.Name)
		if err != nil || rc.UID != c.UID {
			continue
		}
		if sn.cache != nil && !sn.cache.Caught(rc.UID, rc.ResourceVersion) {
			return false
		}
		if !reached(rc.ResourceVersion, e.written[c.UID]) && rc.Status.Allocation == nil {
			return false
		}
	}
	return true
}

// reached reports whether an informer's resourceVersion is at or past the
// one a write returned. resourceVersions are etcd revisions; like
// kube-scheduler's assume cache this compares them as numbers, and treats
// unparsable ones as not reached.
func reached(informer, written string) bool {
	have, err1 := strconv.ParseUint(informer, 10, 64)
	want, err2 := strconv.ParseUint(written, 10, 64)
	return err1 == nil && err2 == nil && have >= want
}

// snapshotInput lists the informers.
func (sn *snapshots) snapshotInput() (index.SnapshotInput, error) {
	var in index.SnapshotInput
	var err error
	if in.Nodes, err = sn.nodes.List(labels.Everything()); err != nil {
		return in, fmt.Errorf("list nodes: %w", err)
	}
	pods, err := sn.pods.List(labels.Everything())
	if err != nil {
		return in, fmt.Errorf("list pods: %w", err)
	}
	in.Pods = make([]*v1.Pod, 0, len(pods))
	for _, p := range pods {
		if p.Spec.NodeName != "" && !podstate.Terminated(p) {
			in.Pods = append(in.Pods, p)
		}
	}
	if in.ResourceSlices, err = sn.slices.List(labels.Everything()); err != nil {
		return in, fmt.Errorf("list resource slices: %w", err)
	}
	if in.DeviceClasses, err = sn.classes.List(labels.Everything()); err != nil {
		return in, fmt.Errorf("list device classes: %w", err)
	}
	claims, err := sn.claims.List(labels.Everything())
	if err != nil {
		return in, fmt.Errorf("list resource claims: %w", err)
	}
	// Holds (guard.IsHold) duplicate their claims' devices.
	in.ResourceClaims = slices.DeleteFunc(claims, func(c *resourceapi.ResourceClaim) bool { return guard.IsHold(c, sn.recordNamespace) })
	return in, nil
}

// snapshot returns the snapshot an attempt places on: the informers less
// the nodes other gangs hold against it (held, evict.Evictor.Held), plus
// the assumed decisions. Without held nodes it is the cache's snapshot
// brought up to date (no work in proportion to the cluster); with them,
// one built from the listers. Only the worker calls it.
func (sn *snapshots) snapshot(ctx context.Context, held sets.Set[string]) (*index.Snapshot, error) {
	if len(held) == 0 && sn.cache != nil {
		snap, err := sn.cache.Update(ctx, sn.snap)
		if err != nil {
			sn.snap = nil
			return nil, fmt.Errorf("update snapshot: %w", err)
		}
		sn.snap = snap
		return snap, sn.assumePending(ctx, snap)
	}
	in, err := sn.snapshotInput()
	if err != nil {
		return nil, err
	}
	return sn.snapshotOf(ctx, preemption.WithoutNodes(in, held))
}

// inputFor lists the informers less the held nodes.
func (sn *snapshots) inputFor(held sets.Set[string]) (index.SnapshotInput, error) {
	in, err := sn.snapshotInput()
	if err != nil {
		return in, err
	}
	return preemption.WithoutNodes(in, held), nil
}

func (sn *snapshots) snapshotOf(ctx context.Context, in index.SnapshotInput) (*index.Snapshot, error) {
	snap, err := index.NewSnapshot(ctx, sn.index, in)
	if err != nil {
		return nil, fmt.Errorf("build snapshot: %w", err)
	}
	return snap, sn.assumePending(ctx, snap)
}

// assumePending adds the committed decisions the informers do not show
// yet to a snapshot.
func (sn *snapshots) assumePending(ctx context.Context, snap *index.Snapshot) error {
	for _, w := range snap.Warnings() {
		klog.FromContext(ctx).V(4).Info("Snapshot warning", "warning", w)
	}
	sn.trust.Observe(ctx, snap.Tree())
	pending := sn.assumed.pending(sn.visible)
	sn.metrics.setAssumed(len(pending))
	for _, e := range pending {
		if err := placement.Assume(ctx, snap, e.gang, e.decision); err != nil {
			// The error becomes another gang's refusal: it names neither
			// this gang nor its objects (the log does).
			klog.FromContext(ctx).Error(err, "Assuming a committed decision", "gang", e.decision.Gang)
			return errors.New("a committed decision could not be assumed (the scheduler's log names it)")
		}
	}
	return nil
}

// freeGPUs counts the GPUs of driver gpufabric.dev per NVLink domain that no
// claim (informers or assumed) has allocated; results with admin access
// take nothing, and every domain with a GPU appears, at 0 when none is
// free. With the placement cache the count costs in proportion to the
// allocated devices and domains (index.Cache.FreeGPUs); without it
// (Config.RebuildSnapshots) it lists the informers. It also drops the
// assumed entries the informers show (the metrics loop runs it
// periodically, so entries end even when no gang is being placed); it
// does so before reading the cache, and visible waits for the cache, so a
// decision is never missing from both.
func (sn *snapshots) freeGPUs() (map[string]int, error) {
	pending := sn.assumed.pending(sn.visible)
	sn.metrics.setAssumed(len(pending))
	extra := assumedDevices(pending)
	if sn.cache != nil {
		return sn.cache.FreeGPUs(extra), nil
	}
	in, err := sn.snapshotInput()
	if err != nil {
		return nil, err
	}
	return listFreeGPUs(in, extra), nil
}

// assumedDevices lists the devices the assumed decisions allocate, less
// the results with admin access.
func assumedDevices(pending []*assumed) []structured.DeviceID {
	var out []structured.DeviceID
	for _, e := range pending {
		for _, c := range e.decision.Claims {
			out = appendHeld(out, c.Allocation.Devices.Results)
		}
	}
	return out
}

func appendHeld(out []structured.DeviceID, results []resourceapi.DeviceRequestAllocationResult) []structured.DeviceID {
	for _, r := range results {
		if r.AdminAccess == nil || !*r.AdminAccess {
			out = append(out, structured.MakeDeviceID(r.Driver, r.Pool, r.Device))
		}
	}
	return out
}

// listFreeGPUs is freeGPUs from listed objects: the GPUs topology.NodeGPUs
// reads from the slices, less those the claims and extra hold.
func listFreeGPUs(in index.SnapshotInput, extra []structured.DeviceID) map[string]int {
	used := map[structured.DeviceID]bool{}
	for _, id := range extra {
		used[id] = true
	}
	for _, c := range in.ResourceClaims {
		if a := c.Status.Allocation; a != nil {
			for _, id := range appendHeld(nil, a.Devices.Results) {
				used[id] = true
			}
		}
	}
	free := map[string]int{}
	for _, info := range topology.NodeGPUs(in.ResourceSlices) {
		for _, g := range info.Devices {
			if g.NVLinkDomain == "" {
				continue
			}
			if _, ok := free[g.NVLinkDomain]; !ok {
				free[g.NVLinkDomain] = 0
			}
			if !used[structured.MakeDeviceID(topology.DriverName, g.Pool, g.Device)] {
				free[g.NVLinkDomain]++
			}
		}
	}
	return free
}
