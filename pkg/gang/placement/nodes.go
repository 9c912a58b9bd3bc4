package placement

import (
	"context"
	"math"

	v1 "k8s.io/api/core/v1"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/klog/v2"

	"github.com/gpufabric/gpufabric/pkg/gang/placement/index"
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

// staticCheck applies the checks that do not depend on load: unschedulable,
// taints (NoSchedule, NoExecute), node selector and required node affinity,
// and node selectors of the member's already allocated claims. It returns
// the failed check or "".
func staticCheck(logger klog.Logger, ns *index.NodeState, m *shape) string {
	n := ns.Node()
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
func resourceFit(ns *index.NodeState, m *shape, extra index.ResList, extraPods int64) (int, string) {
	allocatable, requested := ns.Allocatable(), ns.Requested()
	fit := int64(math.MaxInt32)
	limit := ""
	if maxPods, ok := allocatable[v1.ResourcePods]; ok {
		fit = maxPods - ns.Pods() - extraPods
		limit = CheckTooManyPods
	}
	for _, name := range m.resNames {
		want := m.req[name]
		if want <= 0 {
			continue
		}
		free := allocatable[name] - requested[name] - extra[name]
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
func deviceFit(ctx context.Context, s *index.Snapshot, ns *index.NodeState, m *shape, taken map[string]int) (int, string, error) {
	fit := math.MaxInt32
	limit := ""
	for _, class := range m.classes {
		free, err := s.FreeDevices(ctx, ns, class)
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
