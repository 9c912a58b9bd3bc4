package scheduler

import (
	"context"
	"errors"
	"fmt"
	"slices"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/sets"
	corelisters "k8s.io/client-go/listers/core/v1"
	resourcelisters "k8s.io/client-go/listers/resource/v1"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/klog/v2"

	"github.com/gpufabric/gpufabric/pkg/gang/assume"
	"github.com/gpufabric/gpufabric/pkg/gang/guard"
	"github.com/gpufabric/gpufabric/pkg/gang/nodetrust"
	"github.com/gpufabric/gpufabric/pkg/gang/placement"
	"github.com/gpufabric/gpufabric/pkg/gang/placement/index"
	"github.com/gpufabric/gpufabric/pkg/gang/podstate"
	"github.com/gpufabric/gpufabric/pkg/gang/preemption"
	"github.com/gpufabric/gpufabric/pkg/topology"
)

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
	assumed         *assume.Cache
	// shown says whether the informers show an assumed entry.
	shown     *assume.Shown
	pods      corelisters.PodLister
	nodes     corelisters.NodeLister
	claims    resourcelisters.ResourceClaimLister
	templates resourcelisters.ResourceClaimTemplateLister
	slices    resourcelisters.ResourceSliceLister
	classes   resourcelisters.DeviceClassLister
	// cache is fed by the informers (nil with Config.RebuildSnapshots);
	// snap is the snapshot it keeps up to date.
	cache *index.Cache
	snap  *index.Snapshot
	// trust tells refused nodes (those the tree leaves out) once.
	trust *nodetrust.Reporter
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
	pending := sn.assumed.Pending(sn.shown.Visible)
	sn.metrics.SetAssumed(len(pending))
	for _, e := range pending {
		for _, part := range e.Parts {
			if err := placement.Assume(ctx, snap, part.Gang, part.Decision); err != nil {
				// The error becomes another gang's refusal: it names neither
				// this gang nor its objects (the log does).
				klog.FromContext(ctx).Error(err, "Assuming a committed decision", "gang", part.Decision.Gang)
				return errors.New("a committed decision could not be assumed (the scheduler's log names it)")
			}
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
	pending := sn.assumed.Pending(sn.shown.Visible)
	sn.metrics.SetAssumed(len(pending))
	extra := assume.Devices(pending)
	if sn.cache != nil {
		return sn.cache.FreeGPUs(extra), nil
	}
	in, err := sn.snapshotInput()
	if err != nil {
		return nil, err
	}
	return listFreeGPUs(in, extra), nil
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
			for _, id := range assume.AppendHeld(nil, a.Devices.Results) {
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
