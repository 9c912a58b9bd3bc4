package placement

import (
	"context"
	"fmt"
	"sort"
	"strings"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/gpufabric/gpufabric/pkg/gang/placement/index"
	"github.com/gpufabric/gpufabric/pkg/gang/placement/rails"
	"github.com/gpufabric/gpufabric/pkg/topology"
)

// DomainRefusal says why one domain could not take a gang and what would
// help.
type DomainRefusal struct {
	TopologyKey string
	Domain      string
	// FreeDevices of the gang's main class, and the members that fit by the
	// cheap checks.
	FreeDevices int
	PodsFit     int
	// Why is the binding constraint; Action what would lift it.
	Why    string
	Action string
}

// explainer explains, for an Unschedulable, why the domains that came
// closest refused the gang and what would help, from what the Place call
// recorded (refusals, the rail searches' reasons).
type explainer struct {
	*members
	s       *index.Snapshot
	g       *Gang
	fit     *fits
	refused refusals
	// shared are the gang's shared claims to allocate; pin the domain the
	// gang is pinned to, or nil; railWhy, per domain id, why no rail set
	// placed the gang there.
	shared  []*resourceapi.ResourceClaim
	pin     *topology.Domain
	railWhy map[string]string
	// seg is a segmented gang's segmenter (segexplain.go), else nil.
	seg *segmenter
}

// maxExplained bounds Unschedulable.Domains.
const maxExplained = 4

// explain fills the refusal table: the first level tried (the required
// one), its pinned domain or the domains with the most free devices.
func (x *explainer) explain(ctx context.Context, u *Unschedulable) error {
	levels := x.s.LevelsFor(x.g.TopologyKey, x.g.PreferredTopologyKey)
	if len(levels) == 0 {
		return nil
	}
	l := levels[0]
	if x.seg != nil {
		l = x.seg.explainLevel(levels)
	}
	if x.pin != nil {
		l = x.s.Level(x.pin.Key)
	}
	li, err := x.s.LevelIndex(ctx, l, x.class)
	if err != nil {
		return err
	}
	var entries []*index.DomainEntry
	switch {
	case x.pin != nil && len(x.pin.Nodes) > 0:
		if e := li.Of(x.pin.Nodes[0]); e != nil {
			entries = []*index.DomainEntry{e}
		}
	default:
		for i := len(li.Entries()) - 1; i >= 0 && len(entries) < maxExplained; i-- {
			if e := li.Entries()[i]; x.fit.touches(e.Domain()) {
				entries = append(entries, e)
			}
		}
	}
	if len(li.Entries()) == 0 {
		var keys []string
		for _, tl := range x.s.Tree().Levels {
			keys = append(keys, tl.Key)
		}
		u.Domains = append(u.Domains, DomainRefusal{TopologyKey: l.Key, Domain: "(none)",
			Why:    fmt.Sprintf("no node carries the label %s", l.Key),
			Action: fmt.Sprintf("use one of the fabric's levels (%s), or label the nodes", strings.Join(keys, ", "))})
		return nil
	}
	for _, e := range entries {
		r, err := x.refusal(ctx, l, e)
		if err != nil {
			return err
		}
		u.Domains = append(u.Domains, r)
	}
	return nil
}

// refusal explains one domain (see the rules in order below).
func (x *explainer) refusal(ctx context.Context, l *topology.Level, e *index.DomainEntry) (DomainRefusal, error) {
	fit, err := x.fit.countMembers(ctx, e.Domain())
	if err != nil {
		return DomainRefusal{}, err
	}
	r := DomainRefusal{TopologyKey: l.Key, Domain: e.Domain().ID, FreeDevices: e.Free(), PodsFit: fit}
	steps := []func(context.Context, *topology.Level, *index.DomainEntry, *DomainRefusal) (bool, error){
		x.whySharedPin, x.whyChannels, x.whySegments, x.whyTaintedDevices, x.whyFewDevices, x.whySpares, x.whyNodes, x.whyVerify,
	}
	for _, step := range steps {
		done, err := step(ctx, l, e, &r)
		if err != nil || done {
			return r, err
		}
	}
	r.Why = "the allocator found no placement for the claims in time"
	r.Action = "simplify the claims' constraints, or retry when the cluster changes"
	return r, nil
}

// needPods is how many members a placement needs at least.
func (x *explainer) needPods() int {
	if x.g.MinCount > 0 && x.g.MinCount < len(x.per) {
		return x.g.MinCount
	}
	return len(x.per)
}

// whySharedPin: a shared fabric-domain claim pins the gang to one NVLink
// domain, which is smaller than the level asked for.
func (x *explainer) whySharedPin(ctx context.Context, l *topology.Level, e *index.DomainEntry, r *DomainRefusal) (bool, error) {
	fabric := ""
	for _, c := range x.shared {
		for _, class := range claimClasses([]*resourceapi.ResourceClaim{c}) {
			if class == topology.FabricDomainDeviceClass {
				fabric = c.Name
			}
		}
	}
	if fabric == "" || l.Key == topology.TopologyKeyNVLinkDomain || len(x.s.Tree().Levels) == 0 {
		return false, nil
	}
	best, seen := 0, map[*topology.Domain]bool{}
	for _, n := range e.Domain().Nodes {
		child := x.s.Tree().Levels[0].DomainOf(n)
		if child == nil || seen[child] {
			continue
		}
		seen[child] = true
		fit, err := x.fit.countMembers(ctx, child)
		if err != nil {
			return false, err
		}
		best = max(best, fit)
	}
	if best >= x.needPods() {
		return false, nil
	}
	r.Why = fmt.Sprintf("the shared claim %s (%s) pins the gang to one NVLink domain, and at most %d of %d pods fit in one here",
		fabric, topology.FabricDomainDeviceClass, best, len(x.per))
	r.Action = fmt.Sprintf("use topology key %s, or drop the shared fabric-domain claim to spread over %s", topology.TopologyKeyNVLinkDomain, l.Key)
	return true, nil
}

// whyChannels: the shared claims found no free device (a fabric-domain
// pool's channels all in use) in the domain.
func (x *explainer) whyChannels(_ context.Context, _ *topology.Level, e *index.DomainEntry, r *DomainRefusal) (bool, error) {
	if !x.refused.has(CheckAllocator+" for shared claims (domains)", e.Domain().ID) {
		return false, nil
	}
	pool := topology.FabricDomainPoolName(e.Domain().ID)
	total, users := x.s.PoolUse(pool)
	if total == 0 {
		r.Why = fmt.Sprintf("no device for the shared claims is published for %s", e.Domain().ID)
		r.Action = "check that the fabric-domain pools are published (gpufabric-scheduler --domain-channels > 0)"
		return true, nil
	}
	r.Why = fmt.Sprintf("%d of %d channels of %s in use by %s", len(users), total, pool, shortList(users, 4))
	r.Action = "wait for one of those gangs to finish, or raise the scheduler's --domain-channels"
	return true, nil
}

// whyTaintedDevices: free devices of the class carry device taints the
// claims do not tolerate.
func (x *explainer) whyTaintedDevices(ctx context.Context, _ *topology.Level, e *index.DomainEntry, r *DomainRefusal) (bool, error) {
	if x.class == "" {
		return false, nil
	}
	tainted := map[string][]string{} // taint key → nodes
	count := 0
	for _, n := range e.Domain().Nodes {
		ns := x.s.Node(n)
		keys, k, err := x.s.TaintedFree(ctx, ns, x.class)
		if err != nil {
			return false, err
		}
		count += k
		for _, key := range keys {
			tainted[key] = append(tainted[key], n)
		}
	}
	if count == 0 || e.Free()-count >= x.need && !x.refused.in(CheckAllocator, e.Domain()) {
		return false, nil
	}
	keys := make([]string, 0, len(tainted))
	for k := range tainted {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s on %s", k, shortList(tainted[k], 3)))
	}
	r.Why = fmt.Sprintf("%d of %d free %s carry device taints: %s", count, e.Free(), x.class, strings.Join(parts, "; "))
	r.Action = fmt.Sprintf("repair those devices, or tolerate %s in the claims' requests (exactly.tolerations)", strings.Join(keys, ", "))
	return true, nil
}

// whyFewDevices: not enough free devices of the main class.
func (x *explainer) whyFewDevices(ctx context.Context, l *topology.Level, e *index.DomainEntry, r *DomainRefusal) (bool, error) {
	if x.class == "" || e.Free() >= x.need {
		return false, nil
	}
	r.Why = fmt.Sprintf("free %s: %d of %d needed", x.class, e.Free(), x.need)
	actions, err := x.hints(ctx, l, r.PodsFit)
	if err != nil {
		return false, err
	}
	r.Action = strings.Join(append(actions, "wait for devices to free up"), ", or ")
	return true, nil
}

// hints: a lower minCount, or a wider topology key, that would fit.
func (x *explainer) hints(ctx context.Context, l *topology.Level, fit int) ([]string, error) {
	var out []string
	if x.seg != nil {
		fit -= fit % x.seg.size // whole segments
	}
	if fit > 0 && fit < x.needPods() {
		out = append(out, fmt.Sprintf("lower minCount to %d", fit))
	}
	if x.g.TopologyKey == "" {
		return out, nil
	}
	for _, wider := range x.s.Tree().Levels {
		if wider.Index <= l.Index || l.Index < 0 {
			continue
		}
		li, err := x.s.LevelIndex(ctx, wider, x.class)
		if err != nil {
			return nil, err
		}
		if n := len(li.Entries()); n > 0 && li.Entries()[n-1].Free() >= x.need && li.Entries()[n-1].PodsBound(x.perPod) >= len(x.per) {
			out = append(out, fmt.Sprintf("use the wider topology key %s (%s has %d free)", wider.Key, li.Entries()[n-1].Domain().ID, li.Entries()[n-1].Free()))
			break
		}
	}
	return out, nil
}

// whySpares: too few members fit as free nodes are kept spares (spares.Guard).
func (x *explainer) whySpares(_ context.Context, _ *topology.Level, e *index.DomainEntry, r *DomainRefusal) (bool, error) {
	if r.PodsFit < x.needPods() {
		r.Why, r.Action = x.fit.spares.Explain(e.Domain())
	}
	return r.Why != "", nil
}

// whyNodes: devices suffice, but node checks leave room for too few pods.
func (x *explainer) whyNodes(ctx context.Context, _ *topology.Level, e *index.DomainEntry, r *DomainRefusal) (bool, error) {
	if r.PodsFit >= x.needPods() {
		return false, nil
	}
	byCheck := map[string][]string{}
	for _, n := range e.Domain().Nodes {
		_, why, err := x.fit.fitOn(ctx, x.s.Node(n), 0, nil)
		if err != nil {
			return false, err
		}
		if why != "" {
			byCheck[why] = append(byCheck[why], n)
		}
	}
	check, nodes := "", []string(nil)
	for c, ns := range byCheck {
		if len(ns) > len(nodes) || len(ns) == len(nodes) && c < check {
			check, nodes = c, ns
		}
	}
	if check == "" {
		return false, nil
	}
	r.Why = fmt.Sprintf("room for %d of %d pods: %s on %d nodes (%s)", r.PodsFit, x.needPods(), check, len(nodes), shortList(nodes, 3))
	r.Action = nodeAction(check, x.perPod)
	return true, nil
}

func nodeAction(check string, perPod int) string {
	switch {
	case strings.HasPrefix(check, CheckTaint):
		return "tolerate " + strings.TrimSpace(strings.TrimPrefix(check, CheckTaint)) + " in the pods, or fix the nodes"
	case strings.HasPrefix(check, checkInsufficient) && strings.HasSuffix(check, " devices"):
		return fmt.Sprintf("free devices are spread over nodes; each pod needs %d on one node: use smaller pods, or wait for nodes to free up", perPod)
	case strings.HasPrefix(check, checkInsufficient), check == CheckTooManyPods:
		return "lower the pods' requests, or wait for the nodes to free up"
	case check == CheckUnschedulable:
		return "uncordon the nodes"
	case check == CheckAffinity:
		return "check the pods' node selector and node affinity"
	case check == CheckVolumeAffinity:
		return "the pods' volumes live on other nodes"
	}
	return "check the nodes"
}

// whyVerify: the per-node checks passed, the real placement did not.
func (x *explainer) whyVerify(_ context.Context, _ *topology.Level, e *index.DomainEntry, r *DomainRefusal) (bool, error) {
	switch {
	case x.refused.has(CheckRailAlignment, e.Domain().ID):
		r.Why = "no placement keeps every member on one set of IB rails"
		if why := x.railWhy[e.Domain().ID]; why != "" {
			r.Why += ": " + why
		}
		r.Action = fmt.Sprintf("set %s: %s, or wait for aligned GPUs", topology.AnnotationRailAlignment, topology.RailAlignmentPreferred)
	case x.refused.in(CheckRailFollow, e.Domain()):
		r.Why = fmt.Sprintf("on %s no free NICs lie on the IB rails of the GPUs a member can get there", plural(x.refused.countIn(CheckRailFollow, e.Domain()), "node"))
		r.Action = fmt.Sprintf("set %s: %s to accept NICs on other rails, or wait for NICs on those rails", topology.AnnotationRailAlignment, topology.RailAlignmentPreferred)
	case x.refused.in(CheckRailFollowBudget, e.Domain()):
		r.Why = fmt.Sprintf("on %s the engine stopped after %d tries to put a member's NICs on its GPUs' IB rails (the NICs the counts allow were refused: device taints, selectors)",
			plural(x.refused.countIn(CheckRailFollowBudget, e.Domain()), "node"), rails.MaxFollowCalls)
		r.Action = fmt.Sprintf("set %s: %s to accept NICs on other rails, or check the NICs' device taints", topology.AnnotationRailAlignment, topology.RailAlignmentPreferred)
	case x.refused.has(CheckSearchBudget, e.Domain().ID):
		r.Why = "the search over the members' nodes ran out of its budget of allocator calls"
		r.Action = "give the members fewer distinct shapes, or retry when the cluster changes"
	case x.refused.in(CheckPodAntiAffinity, e.Domain()):
		r.Why = fmt.Sprintf("required pod anti-affinity leaves too few nodes (refused on %d nodes)", x.refused.countIn(CheckPodAntiAffinity, e.Domain()))
		r.Action = "relax the pods' anti-affinity, or wait for the conflicting pods to finish"
	case x.refused.in(CheckAllocator, e.Domain()):
		r.Why = fmt.Sprintf("the allocator refused the claims on %d nodes (their selectors or constraints)", x.refused.countIn(CheckAllocator, e.Domain()))
		r.Action = "check the claims' selectors and matchAttribute constraints"
	case x.refused.has(CheckSearch, e.Domain().ID):
		r.Why = "no assignment of the members to its nodes fits every member's devices and resources"
		r.Action = "wait for devices to free up, or use a wider topology key"
	default:
		return false, nil
	}
	return true, nil
}

// shortList joins at most n items, saying how many more there are.
func shortList(items []string, n int) string {
	if len(items) <= n {
		return strings.Join(items, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(items[:n], ", "), len(items)-n)
}
