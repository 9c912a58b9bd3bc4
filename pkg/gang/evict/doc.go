// Package evict is gpufabric-scheduler's evict room: the API side of the
// pure pkg/gang/preemption. It gathers what may be evicted from the
// informers, carries a preemption plan out (a nomination record, then
// evictions), holds room for the gangs that wait (the nodes of their
// nominations, the domains reserved for starving gangs), and restarts
// PodGroups disrupted only whole. The loop (pkg/gang/scheduler) builds an
// Evictor and a Restarter per leadership term from one Config and starts
// Evictor.Run; the room calls back into the loop only through the small
// interfaces it declares (Conditions, Requeuer, Gangs) and never imports
// it.
//
// Files: config.go (Config, the interfaces, Attempt), preempt.go (Evictor:
// after a refusal, the plan, held nodes, the end of a gang's wait, Run),
// evict.go (evicting a nomination's victims, nominatedNodeName; writer: the
// Eviction API and pod status), nomination.go (the nomination record in
// the commit room's record Store), victims.go (preemption units, budgets),
// trees.go (Trees: victims in CompositePodGroup trees), starve.go
// (reservations of starving gangs), restart.go (Restarter, Disruptions),
// restartclaims.go (a restart waits, at most ClaimRelease, for its old
// members' own claims to release their devices), metrics.go (preemption metrics), priority.go (Priorities:
// gangs' effective priorities from their PriorityClass and pods).
//
// Rules (docs/design/preemption.md, docs/design/health.md):
//   - Priorities are effective ones (preemption.Resolve): a PodGroup ranks
//     no higher than its PriorityClass's value and the lowest priority its
//     pods were admitted with, and does not preempt when its own policy,
//     its class's or a member's is Never; the refusal says why, and a
//     capped PodGroup gets one PriorityCapped event per change.
//   - A victim is a unit: a whole PodGroup whose disruptionMode is All, or
//     one pod; only running units of lower (effective) priority than the
//     preemptor are candidates, with the claims only they hold and the
//     PodDisruptionBudgets that cover them.
//   - In a CompositePodGroup tree (Config.Trees), as kube-scheduler 1.37:
//     a pod goes with the highest group above or at its PodGroup whose
//     disruptionMode is All (every running pod of every leaf PodGroup
//     under it is one unit), alone when there is none, and every unit of
//     a tree is valued at its root's effective priority (capped by the
//     root's class and the tree's pods, Priorities.Tree). A tree that
//     cannot be read (a cycle, past a tree's bounds) leaves its PodGroups
//     standing alone.
//   - A refused tree preempts as a gang does (AfterTreeRefusal): the plan
//     places it with its own placer (the tree search) in the domains of
//     its root's level; the nomination is keyed by the tree's key and its
//     root's UID, events name the root CompositePodGroup; a starving tree
//     reserves the domain of its root's level closest to fitting it (the
//     tree search on each candidate emptied), when none of it runs.
//   - A plan is carried out in order: the nomination record first (the
//     victims, their claims, the domain, the held nodes), then the
//     evictions through the Eviction API with each victim's grace period
//     and a UID precondition, covered pods first. A refused eviction (429)
//     ends the preemption (PreemptionBlocked). A victim PodGroup and a
//     victim we schedule get DisruptionTarget, reason PreemptionByScheduler.
//   - Only the pods a nomination record names are ever evicted, and only
//     while they still run with the UID recorded and a priority below the
//     preemptor's: a scheduler that restarts mid-preemption carries the
//     record on and never evicts twice. An invalid record is reported and
//     deleted, never acted on.
//   - While a nomination lasts, gangs of the preemptor's priority or lower
//     do not see its nodes (Held). It ends when the gang is placed (once
//     the shared claims of victim PodGroups are released; Run finishes
//     those whose groups still had pods), when the gang changed, when
//     victims still run after NominationTimeout, or when they are gone and
//     the gang still does not fit after min(30s, NominationTimeout).
//   - A gang refused for longer than StarvationBound holds the domain
//     closest to fitting it (in memory) against gangs of its priority or
//     lower that cannot finish before its shadow time (EASY backfilling).
//   - A whole-gang restart marks the PodGroup DisruptionTarget=True
//     (MemberDisrupted; its lastTransitionTime is the boundary), evicts the
//     members bound before the boundary, releases the shared claims once
//     they are gone (ReplacingMembers), and ends (GangRestarted) once the
//     recreated members run. A round of evictions a PodDisruptionBudget
//     refuses backs the restart off (RestartRetry doubled per refused
//     round, up to RestartBackoffCap): nothing is evicted again before, and
//     the first refused round says so once (RestartBlocked, and the
//     condition's message).
//   - Every write passes the gate; an error that stops the scheduler
//     (gate.Stops) is returned at once.
package evict
