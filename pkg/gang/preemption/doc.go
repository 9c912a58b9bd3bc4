// Package preemption chooses what to evict so that a gang of higher
// priority fits inside one fabric domain, and which domain a gang that has
// waited too long may reserve, and resolves priorities (priority.go) as
// kube-scheduler does. It is pure like the placement engine it builds on:
// snapshot input in, plan out, no client-go; the scheduler's evict room
// (pkg/gang/evict) gathers the input, evicts and reserves.
//
// Rules of a plan (docs/design/preemption.md):
//   - the preemptor is a gang, placed by the engine, or a CompositePodGroup
//     tree (Tree), placed by its own Placer (the tree search, which this
//     package does not import);
//   - a victim is a Unit: a whole PodGroup whose disruptionMode is All, a
//     whole CompositePodGroup's subtree, or one pod; only units of lower
//     priority than the preemptor are victims;
//   - candidate domains are those of the preemptor's required level (its
//     topology key; a tree's root's), or without a key the levels from the
//     smallest up; the first level where a plan exists wins, as placement
//     would;
//   - in a domain, all candidate victims are removed, the gang is placed by
//     the engine, then victims are given back (reprieved), the most
//     important first, as long as the gang still places as many pods;
//   - a plan never evicts more pods covered by a PodDisruptionBudget than
//     the budget allows;
//   - of the domains with a plan, the cheapest wins: lowest highest victim
//     priority, then fewest victim units, then least GPU-time lost, then
//     fewest pods, then the domain id.
//
// Files: plan.go (Request, Plan, Evaluate: the levels and domains tried,
// the cheapest plan; free devices per node), domain.go (one domain's plan:
// remove the victims, place, reprieve; the budgets and the cost), tree.go
// (Placer, Tree: a preemptor placed by its own placer), unit.go (Unit,
// the victims' order and Cost), input.go (snapshot input
// restricted to a domain's nodes, or without nodes or victims), reserve.go
// (starvation: the domain a starving gang reserves, its devices, releases
// and shadow times) and priority.go (priorities as kube-scheduler resolves
// them, with gpufabric's guards: Resolve; who may preempt).
package preemption
