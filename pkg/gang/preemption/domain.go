package preemption

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/gpufabric/gpufabric/pkg/gang/placement"
	"github.com/gpufabric/gpufabric/pkg/gang/placement/index"
	"github.com/gpufabric/gpufabric/pkg/topology"
)

// domain evaluates one domain: remove every victim there, place, then
// give victims back while the gang still places as many pods.
func (e *evaluator) domain(ctx context.Context, l *topology.Level, d *topology.Domain, victims []*Unit) (*Plan, string, error) {
	e.plan.Evaluated++
	sub := restrict(e.req.Input, sets.New(d.Nodes...))
	dec, msg, err := e.try(ctx, sub, victims)
	if err != nil {
		return nil, "", err
	}
	if dec == nil {
		return nil, fmt.Sprintf("%s %s: the %s does not fit even without its %d workloads of lower priority (%s)", l.Key, d.ID, e.who.what, len(victims), msg), nil
	}
	want := len(dec.Pods)
	kept := map[*Unit]bool{}
	var reprieve func(list []*Unit) error
	reprieve = func(list []*Unit) error {
		if len(list) == 0 || e.outOfTime() {
			return nil
		}
		var trial []*Unit
		inList := map[*Unit]bool{}
		for _, v := range list {
			inList[v] = true
		}
		for _, v := range victims {
			if !kept[v] && !inList[v] {
				trial = append(trial, v)
			}
		}
		got, _, err := e.try(ctx, sub, trial)
		if err != nil {
			return err
		}
		if got != nil && len(got.Pods) >= want {
			for _, v := range list {
				kept[v] = true
			}
			dec = got
			return nil
		}
		if len(list) == 1 {
			return nil
		}
		h := len(list) / 2
		if err := reprieve(list[:h]); err != nil {
			return err
		}
		return reprieve(list[h:])
	}
	if err := reprieve(reprieveOrder(victims)); err != nil {
		return nil, "", err
	}
	if e.outOfTime() {
		return nil, fmt.Sprintf("%s %s: evaluation ran out of time", l.Key, d.ID), nil
	}
	var evict []*Unit
	for _, v := range reprieveOrder(victims) {
		if !kept[v] {
			evict = append(evict, v)
		}
	}
	if why := e.overBudget(evict); why != "" {
		return nil, fmt.Sprintf("%s %s: %s", l.Key, d.ID, why), nil
	}
	return &Plan{TopologyKey: l.Key, Domain: d.ID, Victims: evict, Decision: dec, Cost: e.cost(evict)}, "", nil
}

// try places the preemptor on sub without the given units: the engine
// a gang, a tree's Placer the tree.
func (e *evaluator) try(ctx context.Context, sub index.SnapshotInput, gone []*Unit) (*placement.Decision, string, error) {
	e.plan.Placements++
	snap, err := index.NewSnapshot(ctx, e.cfg.Index, without(sub, gone))
	if err != nil {
		return nil, "", fmt.Errorf("preemption snapshot: %w", err)
	}
	return e.who.placer.Place(ctx, e.cfg, snap)
}

// overBudget says which PodDisruptionBudget evicting units would exceed,
// naming only those of the preemptor's namespace.
func (e *evaluator) overBudget(units []*Unit) string {
	use := map[string]int{}
	for _, u := range units {
		for b, n := range u.Budgets {
			use[b] += n
		}
	}
	var over []string
	for b, n := range use {
		if allowed := e.req.Budgets[b]; n > allowed {
			name := "a PodDisruptionBudget of another namespace"
			if ns, _, _ := strings.Cut(b, "/"); ns == e.who.namespace {
				name = "PodDisruptionBudget " + b
			}
			over = append(over, fmt.Sprintf("%s allows %d disruptions, the %s needs %d", name, allowed, e.who.what, n))
		}
	}
	sort.Strings(over)
	return strings.Join(over, "; ")
}

func (e *evaluator) cost(units []*Unit) Cost {
	var c Cost
	for i, u := range units {
		if i == 0 || u.Priority > c.MaxPriority {
			c.MaxPriority = u.Priority
		}
		c.Units++
		c.Pods += len(u.Pods)
		c.Devices += e.devices[u]
		if !u.Start.IsZero() && e.req.Now.After(u.Start) {
			c.GPUSeconds += int64(e.devices[u]) * int64(e.req.Now.Sub(u.Start).Seconds())
		}
	}
	return c
}
