package placement

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpufabric/gpufabric/pkg/gang/placement/cost"
	"github.com/gpufabric/gpufabric/pkg/gang/placement/extended"
	"github.com/gpufabric/gpufabric/pkg/gang/placement/rank"
	"github.com/gpufabric/gpufabric/pkg/topology"
)

// ErrNotReady says a gang cannot enter placement yet: too few members, or
// a claim it needs does not exist.
var ErrNotReady = errors.New("gang not ready")

// MissingClaim is a claim a gang needs that does not exist (yet): one from
// a template that kube-controller-manager has not created, or one named
// directly that cannot be read. It is ErrNotReady.
type MissingClaim struct {
	Owner    string // "pod ns/name" or "podgroup ns/name"
	Claim    string // the claim's name, or the pod's/PodGroup's name for it
	Template string // the template it is made from, if any
	Err      error  // the lookup's error, for a claim named directly
}

func (e *MissingClaim) Error() string {
	switch {
	case e.Template != "":
		return fmt.Sprintf("%v: %s: claim %s (from template %s) not created yet", ErrNotReady, e.Owner, e.Claim, e.Template)
	case e.Err != nil:
		return fmt.Sprintf("%v: %s: claim %s: %v", ErrNotReady, e.Owner, e.Claim, e.Err)
	}
	return fmt.Sprintf("%v: %s: claim %s not created yet", ErrNotReady, e.Owner, e.Claim)
}

func (e *MissingClaim) Unwrap() []error { return []error{ErrNotReady, e.Err} }

func ptrOr(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

// ErrInvalid marks a gang whose PodGroup asks for something invalid (an
// annotation value not in its documented list): it is refused with the
// reason, never read as a default.
var ErrInvalid = errors.New("invalid")

// Gang is what Place places: all Members on one domain, or none.
type Gang struct {
	Namespace string
	// Name of the PodGroup, or of the pod for a gang of one.
	Name string
	UID  types.UID
	// MinCount is the PodGroup's gang minCount: Place places all Members
	// when it can, else at least MinCount of them in one domain; a gang with
	// fewer Members than MinCount is not ready.
	MinCount int
	// TopologyKey is schedulingConstraints.topology[0].key: a level of the
	// fabric tree or any node label. Empty: the smallest level that fits.
	TopologyKey string
	// PreferredTopologyKey is tried first, then the levels above it.
	PreferredTopologyKey string
	// RailAlignmentRequired rejects placements whose members' GPUs are on
	// different sets of IB rails.
	RailAlignmentRequired bool
	// Rails, when set, are the only IB rails the members' devices may use
	// (a coupled role of a CompositePodGroup, pkg/gang/composite): their
	// claims are limited to them, a device on every one for a member that
	// asks as many of the main class (rails.Copies); devices without a
	// rail stay allowed.
	Rails []int64
	// Balanced splits a gang that spans several domains of the level below
	// its own evenly over the fewest of them (annotation
	// gpufabric.dev/topology-spread: balanced); otherwise they are filled
	// in turn.
	Balanced bool
	// Members in rank order (rank.Compare: workload index labels, then
	// names with numeric suffixes compared as numbers).
	Members []Member
	// BoundNodes are the nodes of the gang's members that already run (late
	// members join them): Place keeps the gang in the one domain that holds
	// all of them.
	BoundNodes []string
	// PreviousNodes: a gang restarting whole ran there; it may use their
	// domains' spares (Config.Spares), as BoundNodes may their domain's.
	PreviousNodes []string
	// Within, when set, holds the gang inside that domain's nodes (a
	// CompositePodGroup's child inside its parent's domain): its own
	// domains are those that share nodes with it, and no member goes to
	// a node outside it (CheckWithin).
	Within *topology.Domain
	// SharedClaims are the claims every member uses, allocated once for
	// the gang: the PodGroup's claims, and the unallocated claims that
	// every member names itself (MemberShared).
	SharedClaims []*resourceapi.ResourceClaim
	// SegmentSize and SegmentTopologyKey ask for hard segments
	// (annotations gpufabric.dev/segment-size and
	// gpufabric.dev/segment-topology-key; segments.go): every SegmentSize
	// consecutive members in rank order lie in one domain of the level
	// SegmentTopologyKey names. 0: no segments.
	SegmentSize        int
	SegmentTopologyKey string
	// Running are the gang's members that already run (Spec.NodeName set),
	// read only for a segmented gang: they fix the ranks, and the segment
	// domains, of late members.
	Running []*v1.Pod
	// MemberShared holds the UIDs of the SharedClaims that the members
	// name themselves (pod claims with one resourceClaimName), not the
	// PodGroup: they are reserved for each placed member, as kube-scheduler
	// reserves a claim for every pod that shares it, not for the PodGroup.
	MemberShared map[types.UID]bool
	// Memory, when set, is what the gang's earlier Place calls remember of
	// refused and timed-out Allocate calls (the scheduler keeps one per
	// gang, cost.Memories); Place reads and adds to it. Nil: each Place
	// remembers for itself only.
	Memory *cost.Memory
}

// Member is one pod of a gang with its own claims (not the shared ones).
type Member struct {
	Pod    *v1.Pod
	Claims []*resourceapi.ResourceClaim
	// VolumePins are the node affinities of the pod's bound persistent
	// volumes (the caller resolves them): the member goes only to nodes
	// that match every one.
	VolumePins []*v1.NodeSelector
	// Extended: the pod's extended resources backed by DRA, with their
	// claim (one of Claims); nil when none (pkg/gang/extres sets it).
	Extended *extended.Resources
}

// Key is "namespace/name".
func (g *Gang) Key() string { return g.Namespace + "/" + g.Name }

// ClaimGetter returns a ResourceClaim, or an error when it does not exist.
type ClaimGetter func(namespace, name string) (*resourceapi.ResourceClaim, error)

// NewGang builds the gang of a PodGroup from its pods (any order) and the
// claims they reference. A pod claim that resolves to one of the PodGroup's
// claims (same name, or same name and template) is shared, not per pod.
func NewGang(pg *schedulingv1beta1.PodGroup, pods []*v1.Pod, getClaim ClaimGetter) (*Gang, error) {
	g := &Gang{Namespace: pg.Namespace, Name: pg.Name, UID: pg.UID, MinCount: 1}
	if gp := pg.Spec.SchedulingPolicy.Gang; gp != nil {
		g.MinCount = int(gp.MinCount)
	}
	if sc := pg.Spec.SchedulingConstraints; sc != nil && len(sc.Topology) > 0 {
		g.TopologyKey = sc.Topology[0].Key
	}
	if v, ok := pg.Annotations[topology.AnnotationPreferredTopologyKey]; ok {
		key, err := topology.ParsePreferredTopologyKey(v)
		if err != nil {
			return nil, fmt.Errorf("podgroup %s/%s: %w: %w", pg.Namespace, pg.Name, err, ErrInvalid)
		}
		g.PreferredTopologyKey = key
	}
	if v, ok := pg.Annotations[topology.AnnotationRailAlignment]; ok {
		required, err := topology.ParseRailAlignment(v)
		if err != nil {
			return nil, fmt.Errorf("podgroup %s/%s: %w: %w", pg.Namespace, pg.Name, err, ErrInvalid)
		}
		g.RailAlignmentRequired = required
	}
	if v, ok := pg.Annotations[topology.AnnotationTopologySpread]; ok {
		balanced, err := topology.ParseTopologySpread(v)
		if err != nil {
			return nil, fmt.Errorf("podgroup %s/%s: %w: %w", pg.Namespace, pg.Name, err, ErrInvalid)
		}
		g.Balanced = balanced
	}
	size, key, err := segmentsOf(pg, g.TopologyKey)
	if err != nil {
		return nil, err
	}
	g.SegmentSize, g.SegmentTopologyKey = size, key
	if len(pods) < g.MinCount {
		return nil, fmt.Errorf("%w: %d of minCount %d members exist", ErrNotReady, len(pods), g.MinCount)
	}
	shared := map[string]bool{}
	for _, rc := range pg.Spec.ResourceClaims {
		name := claimNameFromStatus(rc.Name, rc.ResourceClaimName, pg.Status.ResourceClaimStatuses)
		if name == "" {
			return nil, &MissingClaim{Owner: "podgroup " + pg.Namespace + "/" + pg.Name, Claim: rc.Name, Template: ptrOr(rc.ResourceClaimTemplateName)}
		}
		c, err := getClaim(pg.Namespace, name)
		if err != nil {
			return nil, &MissingClaim{Owner: "podgroup " + pg.Namespace + "/" + pg.Name, Claim: name, Err: err}
		}
		shared[name] = true
		g.SharedClaims = append(g.SharedClaims, c)
	}
	sorted := slices.Clone(pods)
	slices.SortStableFunc(sorted, rank.Compare)
	for _, p := range sorted {
		m, err := newMember(p, pg, shared, getClaim)
		if err != nil {
			return nil, err
		}
		g.Members = append(g.Members, m)
	}
	if err := g.shareMemberClaims(); err != nil {
		return nil, err
	}
	return g, nil
}

// NewPodGang builds the gang of one pod without a PodGroup.
func NewPodGang(pod *v1.Pod, getClaim ClaimGetter) (*Gang, error) {
	m, err := newMember(pod, nil, nil, getClaim)
	if err != nil {
		return nil, err
	}
	return &Gang{Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID, MinCount: 1, Members: []Member{m}}, nil
}

func newMember(p *v1.Pod, pg *schedulingv1beta1.PodGroup, shared map[string]bool, getClaim ClaimGetter) (Member, error) {
	if fields := Unsupported(p); len(fields) > 0 {
		return Member{}, fmt.Errorf("pod %s/%s: %s: %w", p.Namespace, p.Name, strings.Join(fields, ", "), ErrUnsupported)
	}
	m := Member{Pod: p}
	for _, pc := range p.Spec.ResourceClaims {
		if pg != nil && pc.ResourceClaimTemplateName != nil && sharedTemplate(pg, pc) {
			continue
		}
		var name string
		switch {
		case pc.ResourceClaimName != nil:
			name = *pc.ResourceClaimName
		default:
			st, ok := podClaimStatus(p, pc.Name)
			if !ok {
				return Member{}, &MissingClaim{Owner: "pod " + p.Namespace + "/" + p.Name, Claim: pc.Name, Template: ptrOr(pc.ResourceClaimTemplateName)}
			}
			if st == "" {
				continue // the control plane decided the claim is not needed
			}
			name = st
		}
		if shared[name] {
			continue
		}
		c, err := getClaim(p.Namespace, name)
		if err != nil {
			return Member{}, &MissingClaim{Owner: "pod " + p.Namespace + "/" + p.Name, Claim: name, Err: err}
		}
		if slices.ContainsFunc(m.Claims, func(o *resourceapi.ResourceClaim) bool { return o.UID == c.UID }) {
			continue // named twice by the pod: one claim, allocated once
		}
		m.Claims = append(m.Claims, c)
	}
	return m, nil
}

// sharedTemplate reports whether a pod's template claim resolves to the
// PodGroup's claim (same name and template, DRAWorkloadResourceClaims).
func sharedTemplate(pg *schedulingv1beta1.PodGroup, pc v1.PodResourceClaim) bool {
	for _, rc := range pg.Spec.ResourceClaims {
		if rc.Name == pc.Name && rc.ResourceClaimTemplateName != nil && *rc.ResourceClaimTemplateName == *pc.ResourceClaimTemplateName {
			return true
		}
	}
	return false
}

func claimNameFromStatus(name string, direct *string, statuses []schedulingv1beta1.PodGroupResourceClaimStatus) string {
	if direct != nil {
		return *direct
	}
	for _, st := range statuses {
		if st.Name == name && st.ResourceClaimName != nil {
			return *st.ResourceClaimName
		}
	}
	return ""
}

// podClaimStatus returns the generated claim name for a pod claim; ok is
// false when the status has no entry yet.
func podClaimStatus(p *v1.Pod, name string) (string, bool) {
	for _, st := range p.Status.ResourceClaimStatuses {
		if st.Name == name {
			if st.ResourceClaimName == nil {
				return "", true
			}
			return *st.ResourceClaimName, true
		}
	}
	return "", false
}

// shareMemberClaims handles the claims that several members name (pod
// claims with the same resourceClaimName), following kube-scheduler 1.37,
// which allocates such a claim once for a PodGroup's pods (the first pod's
// allocation is shared with the others, which then only go to nodes where
// it is usable) and reserves it for every pod:
//   - an allocated claim stays each member's own claim: its node selector
//     pins every member that names it, and the commit adds all their
//     reservations in one write;
//   - an unallocated claim that every member names moves to SharedClaims
//     (MemberShared): the engine allocates it once, on an anchor node, and
//     places every member where it is usable (one node for node-local
//     devices);
//   - an unallocated claim that only some members name is refused
//     (ErrUnsupported): the engine pins a shared claim's members and the
//     others alike, so placing them would hold the others to its node;
//   - a claim that would be reserved for more consumers than the API
//     allows (resourceapi.ResourceClaimReservedForMaxSize) is refused.
func (g *Gang) shareMemberClaims() error {
	users := map[types.UID][]int{} // claim UID → the members naming it
	var order []*resourceapi.ResourceClaim
	for mi, m := range g.Members {
		for _, c := range m.Claims {
			if users[c.UID] == nil {
				order = append(order, c)
			}
			users[c.UID] = append(users[c.UID], mi)
		}
	}
	for _, c := range order {
		by := users[c.UID]
		if len(by) < 2 {
			continue
		}
		n := len(c.Status.ReservedFor)
		for _, mi := range by {
			if !slices.ContainsFunc(c.Status.ReservedFor, func(r resourceapi.ResourceClaimConsumerReference) bool { return r.UID == g.Members[mi].Pod.UID }) {
				n++
			}
		}
		if n > resourceapi.ResourceClaimReservedForMaxSize {
			return fmt.Errorf("claim %s/%s is named by %d members (%s) and would be reserved for %d consumers, more than the %d a ResourceClaim allows; make it a PodGroup claim (spec.resourceClaims), reserved once for the group: %w",
				c.Namespace, c.Name, len(by), g.memberNames(by), n, resourceapi.ResourceClaimReservedForMaxSize, ErrUnsupported)
		}
		if c.Status.Allocation != nil {
			continue
		}
		if len(by) < len(g.Members) {
			return fmt.Errorf("claim %s/%s is named by %d of the gang's %d members (%s); gpufabric-scheduler allocates a claim that members share once and places every member where it is usable, so every member must name it, or none: %w",
				c.Namespace, c.Name, len(by), len(g.Members), g.memberNames(by), ErrUnsupported)
		}
		if g.MemberShared == nil {
			g.MemberShared = map[types.UID]bool{}
		}
		g.MemberShared[c.UID] = true
		g.SharedClaims = append(g.SharedClaims, c)
	}
	if len(g.MemberShared) > 0 {
		for i := range g.Members {
			g.Members[i].Claims = slices.DeleteFunc(g.Members[i].Claims, func(c *resourceapi.ResourceClaim) bool { return g.MemberShared[c.UID] })
		}
	}
	return nil
}

// memberNames names the first three of the given members and counts the
// rest: "p-0, p-1, p-2 and 5 more".
func (g *Gang) memberNames(idx []int) string {
	var names []string
	for _, mi := range idx[:min(3, len(idx))] {
		names = append(names, g.Members[mi].Pod.Name)
	}
	s := strings.Join(names, ", ")
	if len(idx) > 3 {
		s += fmt.Sprintf(" and %d more", len(idx)-3)
	}
	return s
}

// Demand is what the gang's members ask of the main device class (the
// class the level indexes count): its name, the devices of all members,
// and the least a placement of the gang takes (minCount members of the
// smallest need); "" and 0 for a gang without devices.
func Demand(g *Gang) (class string, devices, least int, err error) {
	m, err := newMembers(g)
	if err != nil {
		return "", 0, 0, err
	}
	return m.class, m.need, min(m.perPod*max(g.MinCount, 1), m.need), nil
}
