package scheduler

import (
	"fmt"
	"sort"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpufabric/gpufabric/pkg/gang/podstate"
	"github.com/gpufabric/gpufabric/pkg/gang/preemption"
	"github.com/gpufabric/gpufabric/pkg/gang/queue"
)

// mirrorAnnotation marks a static pod's mirror: evicting it does nothing.
const mirrorAnnotation = "kubernetes.io/config.mirror"

// victimSet is what preemption may evict, from the informers.
type victimSet struct {
	units []*preemption.Unit
	// budgets: disruptions allowed per PodDisruptionBudget.
	budgets map[string]int
}

// gatherUnits returns every running workload of priority below `below`:
// bound, not terminating, not finished, not a mirror pod; a PodGroup with
// disruptionMode All is one unit (all its running pods, any scheduler's),
// any other pod is a unit of its own. Each unit gets the allocated claims
// that only it holds, and the PodDisruptionBudgets that cover its pods.
func (s *Scheduler) gatherUnits(below int32) (*victimSet, error) {
	pods, err := s.pods.List(labels.Everything())
	if err != nil {
		return nil, fmt.Errorf("list pods: %w", err)
	}
	byKey := map[string]*preemption.Unit{}
	unitOfPod := map[types.UID]string{}
	groups := map[string]*schedulingv1beta1.PodGroup{}
	for _, p := range pods {
		if p.Spec.NodeName == "" || podstate.Terminated(p) || p.DeletionTimestamp != nil || p.Annotations[mirrorAnnotation] != "" {
			continue
		}
		key, prio, whole := s.unitOf(p, groups)
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
	if err := s.assignClaims(byKey, unitOfPod); err != nil {
		return nil, err
	}
	budgets, err := s.assignBudgets(byKey)
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

// unitOf returns a running pod's unit key, its priority, and whether the
// unit is a whole PodGroup.
func (s *Scheduler) unitOf(p *v1.Pod, groups map[string]*schedulingv1beta1.PodGroup) (string, int32, bool) {
	name := queue.PodGroupName(p)
	if name == "" {
		return queue.PodKeyPrefix + p.Namespace + "/" + p.Name, podPriority(p), false
	}
	key := queue.PodGroupKey(p.Namespace, name)
	pg, seen := groups[key]
	if !seen {
		pg, _ = s.podGroups.PodGroups(p.Namespace).Get(name)
		groups[key] = pg
	}
	if pg == nil {
		return queue.PodKeyPrefix + p.Namespace + "/" + p.Name, podPriority(p), false
	}
	prio := podGroupPriority(pg, []*v1.Pod{p})
	if dm := pg.Spec.DisruptionMode; dm != nil && dm.All != nil {
		return key, prio, true
	}
	return queue.PodKeyPrefix + p.Namespace + "/" + p.Name, prio, false
}

func startOf(p *v1.Pod) time.Time {
	if p.Status.StartTime != nil {
		return p.Status.StartTime.Time
	}
	return p.CreationTimestamp.Time
}

// assignClaims gives each unit the allocated claims all of whose
// consumers are in it.
func (s *Scheduler) assignClaims(byKey map[string]*preemption.Unit, unitOfPod map[types.UID]string) error {
	claims, err := s.claims.List(labels.Everything())
	if err != nil {
		return fmt.Errorf("list resource claims: %w", err)
	}
	for _, c := range claims {
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
		if u := byKey[queue.PodGroupKey(ns, ref.Name)]; u != nil && u.Group {
			return u.Key
		}
	}
	return ""
}

// assignBudgets counts each unit's pods per PodDisruptionBudget that
// selects them and returns the disruptions each budget allows.
func (s *Scheduler) assignBudgets(byKey map[string]*preemption.Unit) (map[string]int, error) {
	pdbs, err := s.pdbs.List(labels.Everything())
	if err != nil {
		return nil, fmt.Errorf("list pod disruption budgets: %w", err)
	}
	budgets := map[string]int{}
	for _, pdb := range pdbs {
		sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
		if err != nil { // a nil selector selects nothing
			continue
		}
		name := pdb.Namespace + "/" + pdb.Name
		budgets[name] = int(pdb.Status.DisruptionsAllowed)
		for _, u := range byKey {
			for _, p := range u.Pods {
				if p.Namespace == pdb.Namespace && sel.Matches(labels.Set(p.Labels)) {
					if u.Budgets == nil {
						u.Budgets = map[string]int{}
					}
					u.Budgets[name]++
				}
			}
		}
	}
	return budgets, nil
}
