package membership

import (
	"fmt"
	"strings"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	"github.com/gpufabric/gpufabric/pkg/gang/gangless"
	"github.com/gpufabric/gpufabric/pkg/gang/report"
	"github.com/gpufabric/gpufabric/pkg/gang/vocab"
)

// MaxHops bounds a controller chain: pod → StatefulSet → leader pod →
// StatefulSet → LeaderWorkerSet is the longest the controllers make.
const MaxHops = 5

// maxWarned bounds the pods remembered as warned.
const maxWarned = 4096

// OwnerGrace is how long after a pod's creation a chain that ends at an
// owner the informers have not seen is taken as the informers lagging
// (the controller that made the pod saw its owner first): the pod is not
// placed yet, is looked at again every UnseenRecheck, and is warned only
// once the grace has passed.
const (
	OwnerGrace    = 15 * time.Second
	UnseenRecheck = time.Second
)

// Lookup finds the controller reference of the object ref names in
// namespace ns, if the object is known and has ref's UID.
type Lookup interface {
	ControllerOf(ns string, ref metav1.OwnerReference) (next *metav1.OwnerReference, found bool)
	// GroupsOf names the grouper's PodGroups of namespace ns whose
	// controller has uid.
	GroupsOf(ns string, uid types.UID) []string
	HasSynced() bool
}

// Guard is the membership check the scheduler's loop calls.
type Guard struct {
	owners Lookup
	report *report.Reporter
	clock  clock.PassiveClock

	mu     sync.Mutex
	warned map[types.UID]bool
}

// New returns a Guard that looks owners up in owners and reports through
// r.
func New(owners Lookup, r *report.Reporter) *Guard {
	return &Guard{owners: owners, report: r, clock: clock.RealClock{}, warned: map[types.UID]bool{}}
}

// Admit reports whether pod p is a member of pg: always, unless pg is the
// grouper's and names the UID its members' chains must reach; then only
// when p's chain reaches it. A refused pod gets one NotGroupMember event,
// unless its chain ends at an owner not seen yet and it is younger than
// OwnerGrace: then recheck says when to look again (0 otherwise).
func (g *Guard) Admit(pg *schedulingv1beta1.PodGroup, p *v1.Pod) (member bool, recheck time.Duration) {
	if g == nil || pg.Labels[vocab.LabelManagedBy] != vocab.ManagedByGrouper || !g.owners.HasSynced() {
		return true, 0
	}
	want := types.UID(pg.Annotations[vocab.AnnotationMemberOwnerUID])
	if want == "" {
		return true, 0
	}
	chain, ok, unseen := g.walk(p, func(r metav1.OwnerReference) bool { return r.UID == want })
	if ok {
		return true, 0
	}
	if unseen && g.clock.Since(p.CreationTimestamp.Time) < OwnerGrace {
		return false, UnseenRecheck
	}
	if g.once(p.UID) {
		g.report.Event(p, v1.EventTypeWarning, vocab.EventNotGroupMember, "Scheduling", fmt.Sprintf(
			"pod %s names PodGroup %s, which gpufabric-grouper made for %s, but its controllers (%s) do not lead there: it is not placed as a member. Pods join a workload's gang by being made by its controllers; remove spec.schedulingGroup (or the workload's labels) from this pod",
			report.Quote(p.Name, report.MaxQuoted), pg.Name, workloadOf(pg), chain))
	}
	return false, 0
}

// Hint says why pod p, placed alone, looks like part of a gang: first, a
// grouped workload controls it (its pods name that workload's group, this
// one names none: labels renamed or removed); else gangless's hint.
func (g *Guard) Hint(p *v1.Pod) (gangless.Hint, bool) {
	optedOut := p.Annotations["gpufabric.dev/gang"] == "false"
	if g != nil && !optedOut && g.owners.HasSynced() && (p.Spec.SchedulingGroup == nil || p.Spec.SchedulingGroup.PodGroupName == nil) {
		var groups []string
		chain, _, _ := g.walk(p, func(r metav1.OwnerReference) bool {
			groups = g.owners.GroupsOf(p.Namespace, r.UID)
			return len(groups) > 0
		})
		if len(groups) > 0 {
			return gangless.Hint{Source: "gpufabric-grouper", Message: fmt.Sprintf(
				"pod %s is made by %s, whose gang is PodGroup %s, but it names no PodGroup: its labels lack what gpufabric's admission policy reads (a controller version that renamed them, or a label removed from the template?); gpufabric-scheduler places it alone. See docs/design/workload-grouping.md for the labels of each controller",
				report.Quote(p.Name, report.MaxQuoted), chain, strings.Join(groups, ", "))}, true
		}
	}
	return gangless.Of(p)
}

// walk follows p's controller references, at most MaxHops, until stop
// says so; it returns the chain as text ("Job a → JobSet b"), whether stop
// did, and whether the chain ended at an owner the informers do not hold.
func (g *Guard) walk(p *v1.Pod, stop func(metav1.OwnerReference) bool) (chain string, stopped, unseen bool) {
	var links []string
	ref := metav1.GetControllerOfNoCopy(p)
	for hop := 0; ref != nil && hop < MaxHops; hop++ {
		links = append(links, ref.Kind+" "+report.Quote(ref.Name, report.MaxQuoted))
		if stop(*ref) {
			return strings.Join(links, " → "), true, false
		}
		next, found := g.owners.ControllerOf(p.Namespace, *ref)
		if !found {
			links[len(links)-1] += " (not found)"
			unseen = true
			break
		}
		ref = next
	}
	if len(links) == 0 {
		return "none", false, false
	}
	return strings.Join(links, " → "), false, unseen
}

func (g *Guard) once(uid types.UID) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.warned[uid] {
		return false
	}
	if len(g.warned) >= maxWarned {
		clear(g.warned)
	}
	g.warned[uid] = true
	return true
}

func workloadOf(pg *schedulingv1beta1.PodGroup) string {
	if c := metav1.GetControllerOfNoCopy(pg); c != nil {
		return c.Kind + " " + c.Name
	}
	return "a workload"
}
