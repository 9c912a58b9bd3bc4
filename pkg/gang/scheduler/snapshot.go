package scheduler

import (
	"context"
	"fmt"
	"sync"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/klog/v2"

	"github.com/gpufabric/gpufabric/pkg/gang/placement"
	"github.com/gpufabric/gpufabric/pkg/topology"
)

// assumed is a committed decision the informers may not show yet.
type assumed struct {
	gang     *placement.Gang
	decision *placement.Decision
}

// assumeCache holds committed decisions until the informers show all their
// writes. Rules: an entry is added only after a commit succeeded, and
// dropped when every pod of the decision is bound (or gone) and every claim
// it allocated is allocated (or gone) in the informers. Safe for concurrent
// use.
type assumeCache struct {
	mu      sync.Mutex
	entries map[string]*assumed
}

func newAssumeCache() *assumeCache { return &assumeCache{entries: map[string]*assumed{}} }

func (a *assumeCache) add(key string, g *placement.Gang, d *placement.Decision) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.entries[key] = &assumed{gang: g, decision: d}
}

// waiting reports whether the gang has an entry the informers do not show
// yet; an entry they show is dropped.
func (a *assumeCache) waiting(key string, visible func(*assumed) bool) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	e := a.entries[key]
	if e != nil && visible(e) {
		delete(a.entries, key)
		return false
	}
	return e != nil
}

// pending drops the entries visible says the informers show and returns
// the others, sorted by key.
func (a *assumeCache) pending(visible func(*assumed) bool) []*assumed {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []*assumed
	for key, e := range a.entries {
		if visible(e) {
			delete(a.entries, key)
			continue
		}
		out = append(out, e)
	}
	return out
}

// visible reports whether the informers show all writes of a commit.
func (s *Scheduler) visible(e *assumed) bool {
	for _, pp := range e.decision.Pods {
		p, err := s.pods.Pods(pp.Namespace).Get(pp.Name)
		if err == nil && p.UID == pp.UID && p.Spec.NodeName == "" {
			return false
		}
	}
	for _, c := range e.decision.Claims {
		rc, err := s.claims.ResourceClaims(c.Namespace).Get(c.Name)
		if err == nil && rc.UID == c.UID && rc.Status.Allocation == nil {
			return false
		}
	}
	return true
}

// snapshotInput lists the informers.
func (s *Scheduler) snapshotInput() (placement.SnapshotInput, error) {
	var in placement.SnapshotInput
	var err error
	if in.Nodes, err = s.nodes.List(labels.Everything()); err != nil {
		return in, fmt.Errorf("list nodes: %w", err)
	}
	pods, err := s.pods.List(labels.Everything())
	if err != nil {
		return in, fmt.Errorf("list pods: %w", err)
	}
	in.Pods = make([]*v1.Pod, 0, len(pods))
	for _, p := range pods {
		if p.Spec.NodeName != "" && !terminated(p) {
			in.Pods = append(in.Pods, p)
		}
	}
	if in.ResourceSlices, err = s.slices.List(labels.Everything()); err != nil {
		return in, fmt.Errorf("list resource slices: %w", err)
	}
	if in.DeviceClasses, err = s.classes.List(labels.Everything()); err != nil {
		return in, fmt.Errorf("list device classes: %w", err)
	}
	if in.ResourceClaims, err = s.claims.List(labels.Everything()); err != nil {
		return in, fmt.Errorf("list resource claims: %w", err)
	}
	return in, nil
}

// snapshot builds a snapshot of the informers plus the assumed decisions.
func (s *Scheduler) snapshot(ctx context.Context) (*placement.Snapshot, error) {
	in, err := s.snapshotInput()
	if err != nil {
		return nil, err
	}
	snap, err := placement.NewSnapshot(ctx, s.cfg.Placement, in)
	if err != nil {
		return nil, fmt.Errorf("build snapshot: %w", err)
	}
	for _, w := range snap.Warnings() {
		klog.FromContext(ctx).V(4).Info("Snapshot warning", "warning", w)
	}
	for _, e := range s.assumed.pending(s.visible) {
		if err := snap.Assume(ctx, e.gang, e.decision); err != nil {
			return nil, fmt.Errorf("assume decision of %s: %w", e.decision.Gang, err)
		}
	}
	return snap, nil
}

// freeGPUs counts the GPUs of driver gpufabric.dev per NVLink domain that no
// claim (informers or assumed) has allocated.
func (s *Scheduler) freeGPUs() (map[string]int, error) {
	in, err := s.snapshotInput()
	if err != nil {
		return nil, err
	}
	used := map[string]bool{}
	mark := func(driver, pool, device string) { used[driver+"/"+pool+"/"+device] = true }
	for _, c := range in.ResourceClaims {
		if a := c.Status.Allocation; a != nil {
			for _, r := range a.Devices.Results {
				mark(r.Driver, r.Pool, r.Device)
			}
		}
	}
	for _, e := range s.assumed.pending(func(*assumed) bool { return false }) {
		for _, c := range e.decision.Claims {
			for _, r := range c.Allocation.Devices.Results {
				mark(r.Driver, r.Pool, r.Device)
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
			if !used[topology.DriverName+"/"+g.Pool+"/"+g.Device] {
				free[g.NVLinkDomain]++
			}
		}
	}
	return free, nil
}
