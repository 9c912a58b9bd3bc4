package evict

import (
	"errors"
	"fmt"
	"sort"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	"github.com/gpufabric/gpufabric/pkg/gang/commit"
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
// bound, not terminating, not finished, not a mirror pod; a PodGroup with
// disruptionMode All is one unit (all its running pods, any scheduler's),
// any other pod is a unit of its own. Each unit gets the allocated claims
// that only it holds, and the PodDisruptionBudgets that cover its pods.
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
	groups := map[string]*victimGroup{}
	for _, p := range pods {
		if b.spent() {
			return nil, fmt.Errorf("%w gathering victims (%d pods)", errOutOfBudget, len(pods))
		}
		if p.Spec.NodeName == "" || podstate.Terminated(p) || p.DeletionTimestamp != nil || p.Annotations[mirrorAnnotation] != "" {
			continue
		}
		key, prio, whole := v.unitOf(p, groups)
		if prio >= below {
			continue
		}
		u := byKey[key]
		if u == nil {
			u = &preemption.Unit{Key: key, Priority: prio, Group: whole}
			byKey[key] = u
		}
		u.Pods = append(u.Pods, p)
		if t := startOf(p); !t.IsZero() && (u.Start.IsZero() || t.Before(u.Start)) {
			u.Start = t
		}
		unitOfPod[p.UID] = key
	}
	if len(byKey) == 0 {
		return &victimSet{}, nil // nothing runs below it: no claim or budget to read
	}
	if err := v.assignClaims(byKey, unitOfPod, b); err != nil {
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

// victimGroup is a PodGroup of running pods and its effective priority.
type victimGroup struct {
	pg       *schedulingv1beta1.PodGroup // nil: gone
	priority int32
}

// unitOf returns a running pod's unit key, its priority, and whether the
// unit is a whole PodGroup. A member's priority is its PodGroup's
// effective one (resolveGroup: capped by the class and by its pods, the
// same for every member), read once per group into groups.
func (v *victims) unitOf(p *v1.Pod, groups map[string]*victimGroup) (string, int32, bool) {
	name := podGroupName(p)
	if name == "" {
		return vocab.PodKey(p.Namespace, p.Name), preemption.PodPriority(p), false
	}
	key := vocab.PodGroupKey(p.Namespace, name)
	g, seen := groups[key]
	if !seen {
		g = &victimGroup{}
		if g.pg, _ = v.cfg.PodGroups.PodGroups(p.Namespace).Get(name); g.pg != nil {
			g.priority = resolveGroup(v.cfg, g.pg).Priority
		}
		groups[key] = g
	}
	if g.pg == nil {
		return vocab.PodKey(p.Namespace, p.Name), preemption.PodPriority(p), false
	}
	if dm := g.pg.Spec.DisruptionMode; dm != nil && dm.All != nil {
		return key, g.priority, true
	}
	return vocab.PodKey(p.Namespace, p.Name), g.priority, false
}

func startOf(p *v1.Pod) time.Time {
	if p.Status.StartTime != nil {
		return p.Status.StartTime.Time
	}
	return p.CreationTimestamp.Time
}

// assignClaims gives each unit the allocated claims all of whose
// consumers are in it.
func (v *victims) assignClaims(byKey map[string]*preemption.Unit, unitOfPod map[types.UID]string, b *budget) error {
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
			key := consumerUnit(c.Namespace, ref, unitOfPod, byKey)
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

func consumerUnit(ns string, ref resourceapi.ResourceClaimConsumerReference, unitOfPod map[types.UID]string, byKey map[string]*preemption.Unit) string {
	switch {
	case ref.APIGroup == "" && ref.Resource == "pods":
		return unitOfPod[ref.UID]
	case ref.Resource == "podgroups":
		if u := byKey[vocab.PodGroupKey(ns, ref.Name)]; u != nil && u.Group {
			return u.Key
		}
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

// priority is a running pod's priority as a preemption victim.
func (v *victims) priority(p *v1.Pod) int32 {
	_, prio, _ := v.unitOf(p, map[string]*victimGroup{})
	return prio
}

// podGroupUID returns the UID of the PodGroup of a unit key, "" if gone.
func (v *victims) podGroupUID(key string) types.UID {
	_, ns, name := vocab.SplitKey(key)
	pg, err := v.cfg.PodGroups.PodGroups(ns).Get(name)
	if err != nil {
		return ""
	}
	return pg.UID
}

// sharedClaimOf reports whether a claim is reserved for the PodGroup uid.
func (v *victims) sharedClaimOf(ns, name string, group types.UID) bool {
	c, err := v.cfg.Claims.ResourceClaims(ns).Get(name)
	return err == nil && commit.ReservedFor(c, group)
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
