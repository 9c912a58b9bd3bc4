package placement

import (
	"context"
	"math"
	"slices"

	v1 "k8s.io/api/core/v1"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/klog/v2"

	"github.com/gpufabric/gpufabric/pkg/gang/placement/extended"
	"github.com/gpufabric/gpufabric/pkg/gang/placement/index"
	"github.com/gpufabric/gpufabric/pkg/gang/placement/rails"
	"github.com/gpufabric/gpufabric/pkg/gang/placement/spares"
	"github.com/gpufabric/gpufabric/pkg/topology"
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
	// CheckNodeRefused: the fabric tree left the node out
	// (topology.CheckNodeDomain); the Node has the event that says why.
	CheckNodeRefused  = "NVLink domain not trusted (see the Node's FabricDomainRefused event)"
	CheckSpare        = "spare node kept for replacements"
	CheckWithin       = "outside the parent group's domain"
	checkInsufficient = "insufficient "
)

// fits answers one Place call's cheap per-node questions: how many members
// of a shape a node can take by its static checks, resources and free
// device counts, and whether required anti-affinity with a bound pod rules
// a member out. The static checks are cached per shape and node.
type fits struct {
	*members
	s      *index.Snapshot
	logger klog.Logger
	// pins are the node selectors of the gang's allocated shared claims.
	pins   []*nodeaffinity.NodeSelector
	static map[int]*staticCache
	// spares hides the kept spare nodes from a new gang (nil: none).
	spares *spares.Guard
	// within: the only nodes the gang may use (Gang.Within; nil: all).
	within map[string]bool
}

// staticCache holds staticFail's answers for one shape, by node index.
type staticCache struct {
	done []bool
	why  []string
}

func newFits(ctx context.Context, m *members, s *index.Snapshot, pins []*nodeaffinity.NodeSelector) *fits {
	return &fits{members: m, s: s, logger: klog.FromContext(ctx), pins: pins, static: map[int]*staticCache{}}
}

// staticFail caches staticCheck per shape and node, adding the shared
// claims' selectors.
func (f *fits) staticFail(ns *index.NodeState, shape int) string {
	c := f.static[shape]
	if c == nil {
		c = &staticCache{done: make([]bool, len(f.s.Nodes())), why: make([]string, len(f.s.Nodes()))}
		f.static[shape] = c
	}
	if c.done[ns.Index()] {
		return c.why[ns.Index()]
	}
	v := staticCheck(f.logger, ns, f.distinct[shape])
	if v == "" && f.spares.Hides(ns.Name()) {
		v = CheckSpare
	}
	if v == "" && f.within != nil && !f.within[ns.Name()] {
		v = CheckWithin
	}
	for _, sel := range f.pins {
		if v == "" && !sel.Match(ns.Node()) {
			v = CheckSharedSelector
		}
	}
	c.done[ns.Index()], c.why[ns.Index()] = true, v
	return v
}

// touches reports whether domain d shares a node with Gang.Within (true
// without one).
func (f *fits) touches(d *topology.Domain) bool {
	return f.within == nil || slices.ContainsFunc(d.Nodes, func(n string) bool { return f.within[n] })
}

var _ rails.Fits = (*fits)(nil)

// FitOn is fitOn without usage and reason, for the rail searches.
func (f *fits) FitOn(ctx context.Context, ns *index.NodeState, shape int) (int, error) {
	n, _, err := f.fitOn(ctx, ns, shape, nil)
	return n, err
}

// fitOn returns how many copies of a shape fit on a node by the cheap
// checks, given the usage u of the gang's earlier members (may be nil),
// and the failed check when none.
func (f *fits) fitOn(ctx context.Context, ns *index.NodeState, shape int, u *usage) (int, string, error) {
	if why := f.staticFail(ns, shape); why != "" {
		return 0, why, nil
	}
	if u == nil {
		u = &usage{}
	}
	sh := f.distinct[shape]
	rf, why := resourceFit(ns, sh, u.res, u.pods)
	if rf == 0 {
		return 0, why, nil
	}
	df, why, err := deviceFit(ctx, f.s, ns, sh, u.dev)
	if err != nil || df == 0 {
		return 0, why, err
	}
	return min(rf, df), "", nil
}

// countFit reports whether the domain passes the cheap filter: for every
// shape, the copies that fit on its nodes add up to the members of that
// shape. It also returns how many members of the first shape fit.
func (f *fits) countFit(ctx context.Context, d *topology.Domain) (bool, int, error) {
	want := make([]int, len(f.distinct))
	for _, id := range f.ids {
		want[id]++
	}
	ok := true
	first := 0
	for id := range f.distinct {
		got := 0
		for _, n := range d.Nodes {
			c, _, err := f.fitOn(ctx, f.s.Node(n), id, nil)
			if err != nil {
				return false, 0, err
			}
			if got += c; got >= want[id] {
				break
			}
		}
		if id == 0 {
			first = got
		}
		ok = ok && got >= want[id]
	}
	return ok, min(first, want[0]), nil
}

// countMembers is how many members fit in the domain by the cheap checks:
// per shape, the copies that fit on its nodes, at most its members.
func (f *fits) countMembers(ctx context.Context, d *topology.Domain) (int, error) {
	want := make([]int, len(f.distinct))
	for _, id := range f.ids {
		want[id]++
	}
	total := 0
	for id := range f.distinct {
		got := 0
		for _, n := range d.Nodes {
			c, _, err := f.fitOn(ctx, f.s.Node(n), id, nil)
			if err != nil {
				return 0, err
			}
			if got += c; got >= want[id] {
				got = want[id]
				break
			}
		}
		total += got
	}
	return total, nil
}

// antiExisting reports whether member mi on ns conflicts with a pod
// already bound (index.Snapshot.ConflictsWithBound).
func (f *fits) antiExisting(mi int, ns *index.NodeState) bool {
	sh := f.per[mi]
	return f.s.ConflictsWithBound(sh.pod, sh.anti, ns)
}

// staticCheck applies the checks that do not depend on load: unschedulable,
// taints (NoSchedule, NoExecute), node selector and required node affinity,
// node selectors of the member's already allocated claims, and a device
// plugin serving its DRA-backed extended resources. It returns the failed
// check or "".
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
	return extended.DevicePluginServes(ns.Allocatable(), m.extended)
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
