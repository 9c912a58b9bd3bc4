package placement

import (
	"context"
	"math"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	resourcehelper "k8s.io/component-helpers/resource"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/klog/v2"
)

// Names of the per-node checks, as counted in Unschedulable.NodeChecks.
const (
	CheckUnschedulable  = "node unschedulable"
	CheckTaint          = "untolerated taint"
	CheckAffinity       = "node selector/affinity mismatch"
	CheckClaimSelector  = "node not allowed by an allocated claim"
	CheckTooManyPods    = "too many pods"
	CheckAllocator      = "device allocation refused"
	CheckAllocatorTime  = "device allocation timed out"
	CheckSharedSelector = "node outside the shared claims' node selector"
	checkInsufficient   = "insufficient "
)

// resList is a resource list in integers: millicores for cpu, the value for
// everything else.
type resList map[v1.ResourceName]int64

func toResList(l v1.ResourceList) resList {
	out := make(resList, len(l))
	for name, q := range l {
		if name == v1.ResourceCPU {
			out[name] = q.MilliValue()
		} else {
			out[name] = q.Value()
		}
	}
	return out
}

func podRequests(p *v1.Pod) resList {
	return toResList(resourcehelper.PodRequests(p, resourcehelper.PodResourcesOptions{}))
}

func (r resList) add(o resList, times int64) {
	for name, v := range o {
		r[name] += v * times
	}
}

// nodeState is one node with what the snapshot knows about its load.
type nodeState struct {
	node        *v1.Node
	idx         int                          // position in Snapshot.nodes
	slices      []*resourceapi.ResourceSlice // node-local slices, by name
	allocated   sets.Set[structured.DeviceID]
	allocatable resList
	requested   resList
	pods        int64
	boundPods   []*v1.Pod      // for pod anti-affinity
	devs        *nodeDevices   // built on first use
	free        map[string]int // class → free matching devices; reset by dirty
	// trimmed: class → the node's slices with only that class's devices.
	trimmed map[string][]*resourceapi.ResourceSlice
}

func newNodeState(n *v1.Node) *nodeState {
	return &nodeState{
		node:        n,
		allocated:   sets.New[structured.DeviceID](),
		allocatable: toResList(n.Status.Allocatable),
		requested:   resList{},
		free:        map[string]int{},
	}
}

func (ns *nodeState) addPod(req resList) {
	ns.requested.add(req, 1)
	ns.pods++
}

func (ns *nodeState) dirty() { clear(ns.free) }

// staticCheck applies the checks that do not depend on load: unschedulable,
// taints (NoSchedule, NoExecute), node selector and required node affinity,
// and node selectors of the member's already allocated claims. It returns
// the failed check or "".
func staticCheck(logger klog.Logger, ns *nodeState, m *shape) string {
	n := ns.node
	if n.Spec.Unschedulable {
		taint := v1.Taint{Key: v1.TaintNodeUnschedulable, Effect: v1.TaintEffectNoSchedule}
		if !corev1helpers.TolerationsTolerateTaint(logger, m.pod.Spec.Tolerations, &taint, false) {
			return CheckUnschedulable
		}
	}
	if taint, untolerated := corev1helpers.FindMatchingUntoleratedTaint(logger, n.Spec.Taints, m.pod.Spec.Tolerations, func(t *v1.Taint) bool {
		return t.Effect == v1.TaintEffectNoSchedule || t.Effect == v1.TaintEffectNoExecute
	}, false); untolerated {
		return CheckTaint + " " + taint.Key
	}
	if ok, err := m.affinity.Match(n); err != nil || !ok {
		return CheckAffinity
	}
	for _, sel := range m.pinned {
		if !sel.Match(n) {
			return CheckClaimSelector
		}
	}
	for _, sel := range m.volumes {
		if !sel.Match(n) {
			return CheckVolumeAffinity
		}
	}
	return ""
}

// resourceFit returns how many more copies of the member fit on the node by
// cpu, memory, other requested resources and pod count, given extra usage
// by the gang's earlier members, and the limiting check when none fits.
func resourceFit(ns *nodeState, m *shape, extra resList, extraPods int64) (int, string) {
	fit := int64(math.MaxInt32)
	limit := ""
	if maxPods, ok := ns.allocatable[v1.ResourcePods]; ok {
		fit = maxPods - ns.pods - extraPods
		limit = CheckTooManyPods
	}
	for _, name := range m.resNames {
		want := m.req[name]
		if want <= 0 {
			continue
		}
		free := ns.allocatable[name] - ns.requested[name] - extra[name]
		if c := free / want; c < fit {
			fit, limit = c, checkInsufficient+string(name)
		}
	}
	if fit <= 0 {
		return 0, limit
	}
	return int(fit), ""
}

// deviceFit returns how many more copies of the member the node's free
// device counts allow (an upper bound: class selectors only), given devices
// already taken by the gang's earlier members, and the limiting check.
func (s *Snapshot) deviceFit(ctx context.Context, ns *nodeState, m *shape, taken map[string]int) (int, string, error) {
	fit := math.MaxInt32
	limit := ""
	for _, class := range m.classes {
		free, err := s.freeDevices(ctx, ns, class)
		if err != nil {
			return 0, "", err
		}
		if c := (free - taken[class]) / m.need[class]; c < fit {
			fit, limit = c, checkInsufficient+class+" devices"
		}
	}
	if fit <= 0 {
		return 0, limit, nil
	}
	return fit, "", nil
}
