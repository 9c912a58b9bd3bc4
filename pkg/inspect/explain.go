package inspect

import (
	"fmt"
	"github.com/gpufabric/gpufabric/pkg/gang/vocab"
	"github.com/gpufabric/gpufabric/pkg/topology"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	resourceapi "k8s.io/api/resource/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// BuildExplain says where the PodGroup namespace/name went (rank → pod →
// node → domains, its shared claims) or why it waits (its conditions, the
// members' PodScheduled conditions and gates), with the last maxEvents
// events about it. When the PodGroup does not exist the report says so and
// lists the pods that name it.
func BuildExplain(c *Cluster, opts Options, namespace, name string, maxEvents int) (*ExplainReport, error) {
	ix, err := newIndex(c, opts)
	if err != nil {
		return nil, err
	}
	rep := &ExplainReport{Namespace: namespace, Name: name, Levels: ix.levelKeys(), Warnings: slices.Clone(c.Warnings)}
	pods := membersOf(c.Pods, namespace, name)
	claims := claimsIn(c.Claims, namespace)
	pg := findGroup(c.PodGroups, namespace, name)
	shared := map[string]bool{}
	if pg != nil {
		rep.SharedClaims = sharedClaims(pg, claims)
		for _, sc := range rep.SharedClaims {
			shared[sc.Name] = true
		}
	}
	for _, p := range pods {
		rep.Members = append(rep.Members, ix.member(p, claims, shared))
	}
	sort.SliceStable(rep.Members, func(i, j int) bool { return rankLess(rep.Members[i].Rank, rep.Members[j].Rank) })
	rep.Events = groupEvents(c.Events, namespace, name, maxEvents)
	if pg == nil {
		rep.State = StateNotFound
		rep.Summary = fmt.Sprintf("PodGroup %s/%s does not exist; %s it", namespace, name, plural(len(pods), "pod names", "pods name"))
		return rep, nil
	}
	rep.MinCount = minCount(pg)
	rep.Job = ix.jobs[namespace+"/"+name]
	if sc := pg.Spec.SchedulingConstraints; sc != nil && len(sc.Topology) > 0 {
		rep.TopologyKey = sc.Topology[0].Key
	}
	rep.Segments = segments(pg)
	for _, cond := range pg.Status.Conditions {
		rep.Conditions = append(rep.Conditions, Condition{Type: cond.Type, Status: string(cond.Status), Reason: cond.Reason, Message: cond.Message})
	}
	rep.State = groupState(pg)
	if rep.State == StateWaiting {
		rep.Queue = queuePlace(waitingGangs(c, ix), namespace, name)
	}
	rep.Summary = memberSummary(rep.Members, rep.MinCount)
	return rep, nil
}

// segments describes the PodGroup's segment annotations, "" without.
func segments(pg *schedulingv1beta1.PodGroup) string {
	size, key, err := topology.ParseSegments(pg.Annotations)
	switch {
	case err != nil:
		return "invalid: " + err.Error()
	case size == 0:
		return ""
	}
	return fmt.Sprintf("%d members each in one %s", size, key)
}

func findGroup(groups []schedulingv1beta1.PodGroup, ns, name string) *schedulingv1beta1.PodGroup {
	for i := range groups {
		if groups[i].Namespace == ns && groups[i].Name == name {
			return &groups[i]
		}
	}
	return nil
}

func claimsIn(all []resourceapi.ResourceClaim, ns string) map[string]*resourceapi.ResourceClaim {
	out := map[string]*resourceapi.ResourceClaim{}
	for i := range all {
		if all[i].Namespace == ns {
			out[all[i].Name] = &all[i]
		}
	}
	return out
}

// groupState is Deleting, Failed (its member-loss policy failed it:
// nothing of it is placed again), Placed, MembersLost (placed, then fewer
// members run than it had) or Waiting.
func groupState(pg *schedulingv1beta1.PodGroup) string {
	switch {
	case pg.DeletionTimestamp != nil:
		return StateDeleting
	case meta.IsStatusConditionTrue(pg.Status.Conditions, vocab.ConditionFailed):
		return StateFailed
	case meta.IsStatusConditionTrue(pg.Status.Conditions, vocab.ConditionMembersLost):
		return StateMembersLost
	case meta.IsStatusConditionTrue(pg.Status.Conditions, vocab.ConditionInitiallyScheduled):
		return StatePlaced
	}
	return StateWaiting
}

// sharedClaims lists the PodGroup's claims in spec order.
func sharedClaims(pg *schedulingv1beta1.PodGroup, claims map[string]*resourceapi.ResourceClaim) []ClaimInfo {
	var out []ClaimInfo
	for _, rc := range pg.Spec.ResourceClaims {
		ci := ClaimInfo{Entry: rc.Name}
		switch {
		case rc.ResourceClaimName != nil:
			ci.Name = *rc.ResourceClaimName
		default:
			for _, st := range pg.Status.ResourceClaimStatuses {
				if st.Name == rc.Name && st.ResourceClaimName != nil {
					ci.Name = *st.ResourceClaimName
				}
			}
		}
		if c := claims[ci.Name]; c != nil {
			ci.Devices = allocatedDevices(c)
			for _, r := range c.Status.ReservedFor {
				ci.ReservedFor = append(ci.ReservedFor, r.Resource+"/"+r.Name)
			}
			sort.Strings(ci.ReservedFor)
		}
		out = append(out, ci)
	}
	return out
}

func allocatedDevices(c *resourceapi.ResourceClaim) []string {
	if c.Status.Allocation == nil {
		return nil
	}
	var out []string
	for _, r := range c.Status.Allocation.Devices.Results {
		out = append(out, r.Pool+"/"+r.Device)
	}
	return out
}

// member describes one pod: rank, node and its domains, the devices of its
// own claims (not the shared ones) with their rails, gates, PodScheduled.
func (ix *index) member(p *corev1.Pod, claims map[string]*resourceapi.ResourceClaim, shared map[string]bool) MemberInfo {
	m := MemberInfo{Rank: Rank(p), Pod: p.Name, Node: p.Spec.NodeName, Phase: string(p.Status.Phase)}
	if p.DeletionTimestamp != nil {
		m.Phase = "Terminating"
	}
	if m.Node != "" {
		for _, l := range ix.tree.Levels[:len(ix.tree.Levels)-1] {
			v := ""
			if d := l.DomainOf(m.Node); d != nil {
				v = d.ID
			}
			m.Placement = append(m.Placement, v)
		}
	}
	rails := map[int64]bool{}
	for _, name := range podClaimNames(p) {
		c := claims[name]
		if shared[name] || c == nil {
			continue
		}
		for _, key := range allocatedDevices(c) {
			m.Devices = append(m.Devices, key)
			if d := ix.byKey[key]; d != nil && d.HasRail {
				rails[d.Rail] = true
			}
		}
	}
	m.Rails = sortedKeys(rails)
	for _, g := range p.Spec.SchedulingGates {
		m.Gates = append(m.Gates, g.Name)
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled {
			m.Scheduled = &Condition{Type: string(c.Type), Status: string(c.Status), Reason: c.Reason, Message: c.Message}
		}
	}
	return m
}

// podClaimNames resolves a pod's claims to claim names (a template's claim
// from the pod's status; not created yet: left out).
func podClaimNames(p *corev1.Pod) []string {
	var out []string
	for _, pc := range p.Spec.ResourceClaims {
		if pc.ResourceClaimName != nil {
			out = append(out, *pc.ResourceClaimName)
			continue
		}
		for _, st := range p.Status.ResourceClaimStatuses {
			if st.Name == pc.Name && st.ResourceClaimName != nil {
				out = append(out, *st.ResourceClaimName)
			}
		}
	}
	return out
}

// memberSummary counts members: bound, pending, gated.
func memberSummary(members []MemberInfo, minCount int32) string {
	bound, gated := 0, 0
	var domains []string
	for _, m := range members {
		switch {
		case m.Node != "":
			bound++
			if len(m.Placement) > 0 && m.Placement[0] != "" && !slices.Contains(domains, m.Placement[0]) {
				domains = append(domains, m.Placement[0])
			}
		case len(m.Gates) > 0:
			gated++
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d of %d members bound (minCount %d)", bound, len(members), minCount)
	if len(domains) > 0 {
		slices.Sort(domains)
		fmt.Fprintf(&b, " in NVLink domain %s", strings.Join(domains, ", "))
	}
	if pending := len(members) - bound - gated; pending > 0 {
		fmt.Fprintf(&b, "; %d pending", pending)
	}
	if gated > 0 {
		fmt.Fprintf(&b, "; %d gated", gated)
	}
	return b.String()
}

// groupEvents returns the last max events regarding the PodGroup, oldest
// first. Events that say the same (type, reason, action, note, source) are
// merged into one: counts summed, the latest time kept (one recorder may
// write a repeated event as a second object instead of a series).
func groupEvents(all []eventsv1.Event, ns, name string, maxEvents int) []EventInfo {
	var out []EventInfo
	byText := map[string]int{}
	for i := range all {
		e := &all[i]
		if e.Regarding.Kind != "PodGroup" || e.Regarding.Name != name || e.Namespace != ns {
			continue
		}
		ev := EventInfo{Type: e.Type, Reason: e.Reason, Action: e.Action, Note: e.Note,
			Count: eventCount(e), LastSeen: lastSeen(e).UTC(), From: e.ReportingController}
		key := strings.Join([]string{ev.Type, ev.Reason, ev.Action, ev.Note, ev.From}, "\x00")
		j, seen := byText[key]
		if !seen {
			byText[key] = len(out)
			out = append(out, ev)
			continue
		}
		out[j].Count += ev.Count
		if ev.LastSeen.After(out[j].LastSeen) {
			out[j].LastSeen = ev.LastSeen
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		if !out[i].LastSeen.Equal(out[j].LastSeen) {
			return out[i].LastSeen.Before(out[j].LastSeen)
		}
		return out[i].Reason+out[i].Note < out[j].Reason+out[j].Note
	})
	if maxEvents >= 0 && len(out) > maxEvents {
		out = out[len(out)-maxEvents:]
	}
	return out
}

func eventCount(e *eventsv1.Event) int32 {
	switch {
	case e.Series != nil:
		return e.Series.Count
	case e.DeprecatedCount > 0:
		return e.DeprecatedCount
	}
	return 1
}

func lastSeen(e *eventsv1.Event) metav1.Time {
	switch {
	case e.Series != nil:
		return metav1.Time{Time: e.Series.LastObservedTime.Time}
	case !e.EventTime.IsZero():
		return metav1.Time{Time: e.EventTime.Time}
	case !e.DeprecatedLastTimestamp.IsZero():
		return e.DeprecatedLastTimestamp
	}
	return e.CreationTimestamp
}
