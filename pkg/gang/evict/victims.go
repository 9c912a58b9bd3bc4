package evict

import (
	"errors"
	"fmt"
	"sort"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	"github.com/gpufabric/gpufabric/pkg/gang/podstate"
	"github.com/gpufabric/gpufabric/pkg/gang/preemption"
	"github.com/gpufabric/gpufabric/pkg/gang/vocab"
)

// mirrorAnnotation marks a static pod's mirror: evicting it does nothing.
const mirrorAnnotation = "kubernetes.io/config.mirror"

// victims reads what preemption may evict from the informers' listers.
type victims struct {
	cfg *Config
}

// victimSet is what preemption may evict, from the informers.
type victimSet struct {
	units []*preemption.Unit
	// budgets: disruptions allowed per PodDisruptionBudget.
	budgets map[string]int
}

// errOutOfBudget: the preemption budget ran out while the victims were
// gathered.
var errOutOfBudget = errors.New("the preemption budget ran out")

// budgetCheckEvery is how many objects the scan looks at between two
// looks at the clock.
const budgetCheckEvery = 256

// budget is the deadline of one preemption's scan and evaluation.
type budget struct {
	clock    clock.PassiveClock
	deadline time.Time
	// looked counts the objects looked at since the last clock read.
	looked int
}

// spent reports, every budgetCheckEvery calls, whether the deadline has
// passed (and at the first call).
func (b *budget) spent() bool {
	b.looked++
	if b.looked%budgetCheckEvery != 1 {
		return false
	}
	return !b.clock.Now().Before(b.deadline)
}

// left is what remains of the budget, at least 1 ns (0 would mean none to
// preemption.Evaluate).
func (b *budget) left() time.Duration { return max(b.deadline.Sub(b.clock.Now()), time.Nanosecond) }

// gather returns every running workload of priority below `below`:
// bound, not terminating, not finished, not a mirror pod; the pods of a
// whole (groupOf: a PodGroup with disruptionMode All, or every leaf
// PodGroup under a tree's group with All) are one unit, any other pod is a
// unit of its own. Each unit gets the allocated claims that only it holds,
// and the PodDisruptionBudgets that cover its pods.
// The scan is part of the preemption's budget: it stops with
// errOutOfBudget once the deadline passed (checked every
// budgetCheckEvery objects), before the claims and budgets are read when
// the pods used it up.
func (v *victims) gather(below int32, b *budget) (*victimSet, error) {
	pods, err := v.cfg.Pods.List(labels.Everything())
	if err != nil {
		return nil, fmt.Errorf("list pods: %w", err)
	}
	byKey := map[string]*preemption.Unit{}
	unitOfPod := map[types.UID]string{}
	// unitOfGroup: the unit of each PodGroup whose pods go as a whole
	// (its shared claims go with them).
	unitOfGroup := map[string]string{}
	groups := map[string]*victimGroup{}
	for _, p := range pods {
		if b.spent() {
			return nil, fmt.Errorf("%w gathering victims (%d pods)", errOutOfBudget, len(pods))
		}
		if p.Spec.NodeName == "" || podstate.Terminated(p) || p.DeletionTimestamp != nil || p.Annotations[mirrorAnnotation] != "" {
			continue
		}
		ref := v.unitOf(p, groups)
		if ref.priority >= below {
			continue
		}
		u := byKey[ref.key]
		if u == nil {
			u = &preemption.Unit{Key: ref.key, Priority: ref.priority, Group: ref.group, Composite: vocab.IsCompositeKey(ref.key)}
			byKey[ref.key] = u
		}
		u.Pods = append(u.Pods, p)
		if t := startOf(p); !t.IsZero() && (u.Start.IsZero() || t.Before(u.Start)) {
			u.Start = t
		}
		unitOfPod[p.UID] = ref.key
		if ref.group {
			unitOfGroup[vocab.PodGroupKey(p.Namespace, podGroupName(p))] = ref.key
		}
	}
	if len(byKey) == 0 {
		return &victimSet{}, nil // nothing runs below it: no claim or budget to read
	}
	if err := v.assignClaims(byKey, unitOfPod, unitOfGroup, b); err != nil {
		return nil, err
	}
	budgets, err := v.assignBudgets(byKey, b)
	if err != nil {
		return nil, err
	}
	vs := &victimSet{budgets: budgets}
	for _, u := range byKey {
		sort.Slice(u.Pods, func(i, j int) bool { return u.Pods[i].Name < u.Pods[j].Name })
		vs.units = append(vs.units, u)
	}
	sort.Slice(vs.units, func(i, j int) bool { return vs.units[i].Key < vs.units[j].Key })
	return vs, nil
}

// unitRef is the unit a running pod is evicted with: its key, its
// priority, and whether it is a whole group (a PodGroup, or a
// CompositePodGroup's subtree).
type unitRef struct {
	key      string
	priority int32
	group    bool
}

// unitOf returns a running pod's unit. A member's priority is its
// PodGroup's effective one, or its tree's (groupOf), the same for every
// pod of a unit, read once per group into groups.
func (v *victims) unitOf(p *v1.Pod, groups map[string]*victimGroup) unitRef {
	name := podGroupName(p)
	if name == "" {
		return unitRef{key: vocab.PodKey(p.Namespace, p.Name), priority: preemption.PodPriority(p)}
	}
	key := vocab.PodGroupKey(p.Namespace, name)
	g, seen := groups[key]
	if !seen {
		g = v.groupOf(p.Namespace, name, groups)
		groups[key] = g
	}
	switch {
	case g.pg == nil:
		return unitRef{key: vocab.PodKey(p.Namespace, p.Name), priority: preemption.PodPriority(p)}
	case g.unit == "":
		return unitRef{key: vocab.PodKey(p.Namespace, p.Name), priority: g.priority}
	}
	return unitRef{key: g.unit, priority: g.priority, group: true}
}

func startOf(p *v1.Pod) time.Time {
	if p.Status.StartTime != nil {
		return p.Status.StartTime.Time
	}
	return p.CreationTimestamp.Time
}

// assignClaims gives each unit the allocated claims all of whose
// consumers are in it: its pods, and the PodGroups whose pods it takes
// whole.
func (v *victims) assignClaims(byKey map[string]*preemption.Unit, unitOfPod map[types.UID]string, unitOfGroup map[string]string, b *budget) error {
	claims, err := v.cfg.Claims.List(labels.Everything())
	if err != nil {
		return fmt.Errorf("list resource claims: %w", err)
	}
	for _, c := range claims {
		if b.spent() {
			return fmt.Errorf("%w reading the victims' claims (%d claims)", errOutOfBudget, len(claims))
		}
		if c.Status.Allocation == nil || len(c.Status.ReservedFor) == 0 {
			continue
		}
		owner := ""
		for _, ref := range c.Status.ReservedFor {
			key := consumerUnit(c.Namespace, ref, unitOfPod, unitOfGroup)
			if key == "" || owner != "" && key != owner {
				owner = ""
				break
			}
			owner = key
		}
		if u := byKey[owner]; u != nil {
			u.Claims = append(u.Claims, c.UID)
		}
	}
	return nil
}

func consumerUnit(ns string, ref resourceapi.ResourceClaimConsumerReference, unitOfPod map[types.UID]string, unitOfGroup map[string]string) string {
	switch {
	case ref.APIGroup == "" && ref.Resource == "pods":
		return unitOfPod[ref.UID]
	case ref.Resource == "podgroups":
		return unitOfGroup[vocab.PodGroupKey(ns, ref.Name)]
	}
	return ""
}

// assignBudgets counts each unit's pods per PodDisruptionBudget that
// selects them and returns the disruptions each budget allows. A budget
// is matched against the victims' pods of its own namespace only (it
// selects no other), so one tenant's budgets cost nothing per other
// tenants' pods.
func (v *victims) assignBudgets(byKey map[string]*preemption.Unit, b *budget) (map[string]int, error) {
	type member struct {
		u *preemption.Unit
		p *v1.Pod
	}
	byNamespace := map[string][]member{}
	for _, u := range byKey {
		for _, p := range u.Pods {
			byNamespace[p.Namespace] = append(byNamespace[p.Namespace], member{u, p})
		}
	}
	budgets := map[string]int{}
	for ns, members := range byNamespace {
		pdbs, err := v.cfg.PDBs.PodDisruptionBudgets(ns).List(labels.Everything())
		if err != nil {
			return nil, fmt.Errorf("list pod disruption budgets: %w", err)
		}
		for _, pdb := range pdbs {
			sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
			if err != nil { // a nil selector selects nothing
				continue
			}
			name := pdb.Namespace + "/" + pdb.Name
			budgets[name] = int(pdb.Status.DisruptionsAllowed)
			for _, m := range members {
				if b.spent() {
					return nil, fmt.Errorf("%w matching PodDisruptionBudgets", errOutOfBudget)
				}
				if sel.Matches(labels.Set(m.p.Labels)) {
					if m.u.Budgets == nil {
						m.u.Budgets = map[string]int{}
					}
					m.u.Budgets[name]++
				}
			}
		}
	}
	return budgets, nil
}

// priority is a running pod's priority as a preemption victim; groups
// caches what was read of its group (and tree) for the next pods.
func (v *victims) priority(p *v1.Pod, groups map[string]*victimGroup) int32 {
	return v.unitOf(p, groups).priority
}

// podGroupUID returns the UID of PodGroup ns/name, "" if gone.
func (v *victims) podGroupUID(ns, name string) types.UID {
	pg, err := v.cfg.PodGroups.PodGroups(ns).Get(name)
	if err != nil {
		return ""
	}
	return pg.UID
}

// sharedClaimGroup returns the UID of the PodGroup a claim is reserved
// for when that PodGroup still exists with that UID (its shared claim),
// "" otherwise.
func (v *victims) sharedClaimGroup(ns, name string) types.UID {
	c, err := v.cfg.Claims.ResourceClaims(ns).Get(name)
	if err != nil {
		return ""
	}
	for _, ref := range c.Status.ReservedFor {
		if ref.Resource == "podgroups" && ref.UID != "" && v.podGroupUID(ns, ref.Name) == ref.UID {
			return ref.UID
		}
	}
	return ""
}

// groupsRunning returns the UIDs of the PodGroups that still have a pod a
// nomination record names (live: those still there).
func (v *victims) groupsRunning(rec *nominationRecord, live map[types.UID]bool) map[types.UID]bool {
	out := map[types.UID]bool{}
	seen := map[string]bool{}
	for _, vp := range rec.Victims {
		if !live[vp.UID] {
			continue
		}
		p, err := v.cfg.Pods.Pods(vp.Namespace).Get(vp.Name)
		if err != nil || p.UID != vp.UID {
			continue
		}
		if g := podGroupName(p); g != "" && !seen[p.Namespace+"/"+g] {
			seen[p.Namespace+"/"+g] = true
			if uid := v.podGroupUID(p.Namespace, g); uid != "" {
				out[uid] = true
			}
		}
	}
	return out
}

// coveredByBudget reports whether a PodDisruptionBudget selects the pod.
func (v *victims) coveredByBudget(p *v1.Pod) (bool, error) {
	pdbs, err := v.cfg.PDBs.PodDisruptionBudgets(p.Namespace).List(labels.Everything())
	if err != nil {
		return false, err
	}
	for _, pdb := range pdbs {
		if sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector); err == nil && sel.Matches(labels.Set(p.Labels)) {
			return true, nil
		}
	}
	return false, nil
}

// live returns the UIDs of a nomination record's victim pods that still
// exist.
func (v *victims) live(rec *nominationRecord) map[types.UID]bool {
	live := map[types.UID]bool{}
	for _, vp := range rec.Victims {
		if p, err := v.cfg.Pods.Pods(vp.Namespace).Get(vp.Name); err == nil && p.UID == vp.UID && !podstate.Terminated(p) {
			live[p.UID] = true
		}
	}
	return live
}
