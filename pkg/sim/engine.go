package sim

import (
	"context"
	"fmt"
	"sort"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpufabric/gpufabric/pkg/gang/composite"
	"github.com/gpufabric/gpufabric/pkg/gang/placement"
	"github.com/gpufabric/gpufabric/pkg/gang/placement/index"
	"github.com/gpufabric/gpufabric/pkg/gang/placement/scenario"
	"github.com/gpufabric/gpufabric/pkg/sim/fabric"
	"github.com/gpufabric/gpufabric/pkg/sim/trees"
	"github.com/gpufabric/gpufabric/pkg/topology"
)

// EnginePolicy is the gpufabric placement engine. It keeps one Snapshot:
// a placement is Assumed into it, and a departure marks it stale so the
// next Sync rebuilds it from the fabric plus the pods and allocated claims
// of the running gangs (with a MatchCache, so CEL class matching is not
// redone). Gangs carry no topology key (the smallest level that fits
// wins), except with RequireNVLink.
type EnginePolicy struct {
	// RequireNVLink gives every gang that fits in the largest NVLink
	// domain the required topology key gpufabric.dev/nvlinkDomain, as a
	// user who wants NVLink would set it; larger gangs get no key.
	RequireNVLink bool
	fabric        *fabric.Fabric
	cfg           placement.Config
	snap          *index.Snapshot
	gangs         map[int]*placement.Gang
	groups        map[int]*trees.Group
	running       map[int]*boundGang
	// devs: each running gang's pods' GPU positions (PlacedDevices).
	devs map[int][][]int
	// Rebuilds counts snapshot builds.
	Rebuilds int
	// Starvation, when > 0, is the starvation bound in seconds: a gang that
	// waited longer holds the domain closest to fitting it (reserve.go).
	Starvation int64
	// in is the snapshot's input (fabric plus running gangs), kept up to
	// date with every placement.
	in     index.SnapshotInput
	starve *simStarvation
	// hidden nodes are left out of the snapshot (failure runs:
	// engine_replace.go); nodeGPUs is the fabric's GPUs by node.
	hidden   []bool
	nodeGPUs map[string]topology.NodeGPUInfo
}

// boundGang is what a running gang adds to the snapshot input.
type boundGang struct {
	pods   []*v1.Pod
	claims []*resourceapi.ResourceClaim
}

// NewEnginePolicy returns the engine on fabric f.
func NewEnginePolicy(f *fabric.Fabric) *EnginePolicy {
	// A wall-clock bound on Allocate would make decisions depend on the
	// machine's load (a call cut off counts as "does not fit"): the
	// simulator's results must not, so the bound is far above any call.
	cfg := placement.Config{Index: index.Config{MatchCache: index.NewMatchCache(), AllocateTimeout: time.Minute}}
	cfg.Index.Tree.LabelLevels = f.Levels[1:]
	return &EnginePolicy{fabric: f, cfg: cfg, gangs: map[int]*placement.Gang{}, groups: map[int]*trees.Group{}, running: map[int]*boundGang{}, devs: map[int][][]int{}}
}

func (e *EnginePolicy) Name() string {
	switch {
	case e.RequireNVLink:
		return PolicyGPUFabricNVLink
	case e.Starvation > 0:
		return PolicyGPUFabricReserve
	case e.cfg.PackOrder == placement.PackFullestNodes:
		return PolicyGPUFabricFullest
	}
	return PolicyGPUFabric
}
func (*EnginePolicy) PodByPod() bool { return false }

// Sync rebuilds the snapshot when a gang left since the last build, and
// warms it up with the Place of a one-GPU gang (not assumed): that fills
// the per-node free-device counts (CEL class matching, mostly served by
// the MatchCache), which is snapshot preparation, not a decision.
func (e *EnginePolicy) Sync(ctx context.Context) (bool, error) {
	if e.snap != nil {
		return false, nil
	}
	in := e.visible(e.fabric.Input)
	in.Pods = append([]*v1.Pod(nil), in.Pods...)
	in.ResourceClaims = append([]*resourceapi.ResourceClaim(nil), in.ResourceClaims...)
	ids := make([]int, 0, len(e.running))
	for id := range e.running {
		ids = append(ids, id)
	}
	sort.Ints(ids)
	for _, id := range ids {
		in.Pods = append(in.Pods, e.running[id].pods...)
		in.ResourceClaims = append(in.ResourceClaims, e.running[id].claims...)
	}
	snap, err := index.NewSnapshot(ctx, e.cfg.Index, in)
	if err != nil {
		return false, fmt.Errorf("snapshot: %w", err)
	}
	warm, err := e.gang(TraceGang{ID: -1, Pods: 1, GPUsPerPod: 1})
	if err != nil {
		return false, err
	}
	if _, _, err := placement.Place(ctx, e.cfg, snap, warm); err != nil {
		return false, fmt.Errorf("warm-up: %w", err)
	}
	e.snap, e.in = snap, in
	e.starve.invalidate()
	return true, nil
}

// Release drops a gang's pods and claims; the snapshot is rebuilt on the
// next Sync.
func (e *EnginePolicy) Release(_ context.Context, id int) error {
	if _, ok := e.running[id]; !ok {
		return fmt.Errorf("gang %d is not running", id)
	}
	delete(e.running, id)
	delete(e.devs, id)
	e.snap = nil
	e.starve.ended(id)
	return nil
}

// Place runs placement.Place (a tree job: composite.Place, the tree as
// one decision) and, on success, Assumes the decision.
func (e *EnginePolicy) Place(ctx context.Context, _ *Cluster, g TraceGang, nodes []int) ([]int, error) {
	if _, err := e.Sync(ctx); err != nil {
		return nil, err
	}
	snap, err := e.snapshotFor(ctx, g)
	if err != nil {
		return nil, err
	}
	var leaves []composite.LeafDecision
	var index map[string]int
	if g.Tree != nil {
		leaves, index, err = e.placeTree(ctx, snap, g)
	} else {
		leaves, err = e.placeGang(ctx, snap, g)
	}
	if err != nil || leaves == nil {
		return nil, err
	}
	for _, l := range leaves {
		if err := e.assume(ctx, l.Group.Gang, l.Decision); err != nil {
			return nil, fmt.Errorf("assume gang %d: %w", g.ID, err)
		}
	}
	out, err := e.bind(g, nodes, leaves, index)
	if err != nil {
		return nil, err
	}
	e.started(g)
	delete(e.gangs, g.ID)
	delete(e.groups, g.ID)
	return out, nil
}

// placeGang places a flat gang: its decision as the one leaf.
func (e *EnginePolicy) placeGang(ctx context.Context, snap *index.Snapshot, g TraceGang) ([]composite.LeafDecision, error) {
	gang, err := e.gang(g)
	if err != nil {
		return nil, err
	}
	d, _, err := placement.Place(ctx, e.cfg, snap, gang)
	if err != nil || d == nil {
		return nil, err
	}
	return []composite.LeafDecision{{Group: &composite.Group{Gang: gang}, Decision: d}}, nil
}

// placeTree places a tree job with composite.Place: its leaves' decisions
// and each pod's index in the tree's flattened order, by name.
func (e *EnginePolicy) placeTree(ctx context.Context, snap *index.Snapshot, g TraceGang) ([]composite.LeafDecision, map[string]int, error) {
	tg := e.groups[g.ID]
	if tg == nil {
		var err error
		if tg, err = trees.NewGroup(g.Tree, fmt.Sprintf("t%05d", g.ID)); err != nil {
			return nil, nil, fmt.Errorf("tree %d: %w", g.ID, err)
		}
		e.groups[g.ID] = tg
	}
	d, _, err := composite.Place(ctx, e.cfg, snap, tg.Root, composite.Options{})
	if err != nil || d == nil {
		return nil, nil, err
	}
	return d.Leaves, tg.Pod, nil
}

// bind records where the leaves' pods went: each pod's node (index: its
// position by name; nil: member order), the pods and claims the snapshot
// is rebuilt with, and the GPUs each pod got (PlacedDevices).
func (e *EnginePolicy) bind(g TraceGang, nodes []int, leaves []composite.LeafDecision, index map[string]int) ([]int, error) {
	out := append([]int(nil), nodes...)
	devs := make([][]int, len(out))
	bound := &boundGang{}
	for _, l := range leaves {
		at := map[string]int{}
		for i, pp := range l.Decision.Pods {
			n, ok := e.fabric.NodeIndex[pp.Node]
			pos, known := i, index == nil
			if !known {
				pos, known = index[pp.Name]
			}
			if !ok || !known || pos >= len(out) {
				return nil, fmt.Errorf("gang %d: pod %s placed on %s, which the simulator does not know", g.ID, pp.Name, pp.Node)
			}
			out[pos], at[pp.Name] = n, pos
			pod := *l.Group.Gang.Members[i].Pod
			pod.Spec.NodeName = pp.Node
			pod.Status.Phase = v1.PodRunning
			bound.pods = append(bound.pods, &pod)
		}
		for _, ca := range l.Decision.Claims {
			alloc := ca.Allocation
			bound.claims = append(bound.claims, &resourceapi.ResourceClaim{
				ObjectMeta: metav1.ObjectMeta{Namespace: ca.Namespace, Name: ca.Name, UID: ca.UID},
				Status:     resourceapi.ResourceClaimStatus{Allocation: &alloc},
			})
			if pos, ok := at[ca.Pod]; ok {
				for _, r := range alloc.Devices.Results {
					if p, ok := e.fabric.GPUPos[out[pos]][r.Pool+"/"+r.Device]; ok {
						devs[pos] = append(devs[pos], p)
					}
				}
			}
		}
	}
	e.running[g.ID] = bound
	e.devs[g.ID] = devs
	e.in.Pods = append(e.in.Pods, bound.pods...)
	e.in.ResourceClaims = append(e.in.ResourceClaims, bound.claims...)
	return out, nil
}

// PlacedDevices returns each pod's GPU positions of gang id's placement.
func (e *EnginePolicy) PlacedDevices(id int) [][]int { return e.devs[id] }

// gang builds (once) the PodGroup of a trace gang: pods g%05d-%03d with one
// claim each for GPUsPerPod GPUs of gpu.gpufabric.dev.
func (e *EnginePolicy) gang(g TraceGang) (*placement.Gang, error) {
	if pg := e.gangs[g.ID]; pg != nil {
		return pg, nil
	}
	name := fmt.Sprintf("g%05d", g.ID)
	pg := &schedulingv1beta1.PodGroup{
		ObjectMeta: metav1.ObjectMeta{Namespace: scenario.Namespace, Name: name, UID: types.UID("podgroup-" + name)},
		Spec: schedulingv1beta1.PodGroupSpec{SchedulingPolicy: schedulingv1beta1.PodGroupSchedulingPolicy{
			Gang: &schedulingv1beta1.GangSchedulingPolicy{MinCount: int32(g.Pods)},
		}},
	}
	if e.RequireNVLink && g.GPUs() <= e.fabric.MaxNVLinkGPUs {
		pg.Spec.SchedulingConstraints = &schedulingv1beta1.PodGroupSchedulingConstraints{
			Topology: []schedulingv1beta1.TopologyConstraint{{Key: topology.TopologyKeyNVLinkDomain}},
		}
	}
	claims := map[string]*resourceapi.ResourceClaim{}
	pods := make([]*v1.Pod, g.Pods)
	for i := range pods {
		pod := fmt.Sprintf("%s-%03d", name, i)
		claims[pod+"-gpu"] = scenario.GPUClaim(pod+"-gpu", int64(g.GPUsPerPod))
		pods[i] = scenario.Pod(pod, "1", "1Gi", pod+"-gpu")
		pods[i].Spec.SchedulingGroup = &v1.PodSchedulingGroup{PodGroupName: &pg.Name}
	}
	gang, err := placement.NewGang(pg, pods, func(_, name string) (*resourceapi.ResourceClaim, error) {
		if c := claims[name]; c != nil {
			return c, nil
		}
		return nil, fmt.Errorf("claim %s not found", name)
	})
	if err != nil {
		return nil, fmt.Errorf("gang %d: %w", g.ID, err)
	}
	e.gangs[g.ID] = gang
	return gang, nil
}
