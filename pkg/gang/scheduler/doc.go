// Package scheduler is gpufabric-scheduler's control loop around the pure
// placement engine (pkg/gang/placement): one scheduling attempt is
// informers → queue → snapshot → placement → commit or evict, then the
// gang's status. The loop owns the informers, snapshots and the assume
// cache, status conditions, events, metrics and leader election.
//
// The loop wires rooms that never import it: pkg/gang/queue (the queue
// of gangs: active, backoff, parked; gang keys), pkg/gang/commit (the
// commit protocol, the records, recovery, pipelined commits),
// pkg/gang/evict (preemption, nominations, reservations, whole-gang
// restarts), pkg/gang/replace (lost members replaced in place, the
// bound and the policy after it), pkg/gang/trees (CompositePodGroup trees:
// a tree key cpg:<namespace>/<name> and every PodGroup with a parent go
// there, with Config.CompositePodGroups), pkg/gang/guard (the double-allocation guard and device holds,
// a controller with its own goroutines) and pkg/gang/podstate (the pod
// predicates every room shares).
//
// Types and files:
//   - Scheduler, the loop: scheduler.go (New, Run, the worker, the metrics
//     loop), cycle.go (one attempt: read the gang, place it, commit or
//     refuse it; attempt.go is the attempt, as the evict room sees it
//     too, and how many devices a refused one lacks), rooms.go (building this term's parts and rooms, and the
//     adapters the rooms call back through); config.go is its Config.
//   - gangPods (members.go): a gang's pods from the informers' indexes,
//     its members (pending, gated, running, lost); evict.Gangs.
//   - leaves.go: a tree's leaves as their tree sees them (failed,
//     restarting) and treeRestarts (a CompositePodGroup disrupted only
//     whole restarts every leaf under it); cycle.go runs a leaf's own
//     turn (leafTurn: lost members, whole restarts) before its tree's.
//   - snapshots: snapshot.go (the snapshots an attempt places on, with
//     the decisions of pkg/gang/assume's cache added; free GPUs),
//     cachefeed.go (the placement cache's feed from the informers, run
//     before the queue's handlers: chainFirst),
//     warm.go (the cache's warm-up).
//   - members are pinned to their volumes' nodes by pkg/gang/volumepins,
//     and given their extended resources' claims by pkg/gang/extres
//     (rooms.go: prepare).
//   - gangStatus: status.go (PodGroup conditions, PodScheduled on pods),
//     lifecycle.go (a placed gang's members lost; PodGroups missing or
//     deleting; gated pods), notready.go (the throttled status of gangs
//     not ready yet); its waiting members are told why through
//     pkg/gang/memberevents (one deduplicated, bounded event per member).
//   - priority.go: a gang's rank for the queue.
//   - informers.go: the informers, their indexes, and the events they
//     feed the queue; syncstatus.go: the informers not synced yet (for
//     Config.InformersStarted).
//   - freeroom.go: the free-room publisher's config of a term
//     (pkg/gang/freeroom): the free GPUs and the fabric tree.
//   - metrics.go: Metrics (pkg/gang/metrics: free GPUs per level, per
//     domain only when opted in; gang_wait_seconds once per placement,
//     gangWaitSince here, and per PodGroup deleted before it was placed)
//     and the pending set (when each gang's last scheduling gate went, the
//     wait's start when later than its creation, is pkg/gang/ungate's,
//     fed by informers.go); leader.go: leader election and the fence of its Lease.
//
// Rules:
//   - One worker places one gang at a time, and charges each attempt's time
//     to the gang's namespace (queue.Charge: namespaces share the worker
//     fairly at each priority); every attempt places the gang
//     on a snapshot of the informers, brought up to date by the placement
//     cache from their events (docs/design/snapshot-cache.md), less the
//     nodes other gangs hold against it (evict.Evictor.Held), plus the
//     decisions being committed or committed but not yet visible in both
//     the informers and the cache (the assume cache), so two gangs never
//     get the same device. Commits run beside the worker (commit.Pipeline,
//     up to CommitsInFlight); a gang's key stays processing until its
//     commit ended.
//   - A decision is committed by the commit room (commit.Txn); an attempt
//     for a gang with a commit record recovers it first. Recovery, then the
//     nomination records, are read before the first attempt of every
//     leadership term.
//   - A refused gang that may preempt waits for the commits in flight to
//     land (preemption plans on the listers), then the evict room advances
//     or starts its preemption, or reserves a domain for it.
//   - Nothing here is global: metrics go to the registry in Config, clients
//     and informers are per Scheduler.
//
// See docs/design/commit.md and docs/design/preemption.md.
package scheduler
