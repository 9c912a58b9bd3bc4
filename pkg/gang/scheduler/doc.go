// Package scheduler is gpufabric-scheduler's control loop around the pure
// placement engine (pkg/gang/placement): informers, one queue of gangs, the
// commit protocol that writes a Decision to the API, recovery of commits a
// crash left half done, status conditions, events, metrics and leader
// election.
//
// The loop wires rooms that never import it: pkg/gang/queue (the queue
// of gangs: active, backoff, parked; gang keys), pkg/gang/guard (the
// double-allocation guard and device holds, a controller with its own
// goroutines) and pkg/gang/podstate (the pod predicates every room
// shares). The loop computes a gang's rank for the queue (priority.go),
// feeds it informer events (informers.go), and hands the guard its
// listers, the gate, the reporter, the metrics and a claim releaser
// (rooms.go).
//
// Rules:
//   - One worker places one gang at a time; every attempt places the gang
//     on a snapshot of the informers, brought up to date by the placement
//     cache from their events (docs/design/snapshot-cache.md), plus the
//     decisions being committed or committed but not yet visible in both
//     the informers and the cache (the assume cache), so two gangs never
//     get the same device. Commits run beside the worker (pipeline.go, up
//     to CommitsInFlight); a gang's key stays processing until its commit
//     ended.
//   - A PodGroup commit writes, in phases: the intent annotation, the shared
//     claims (reserved for the PodGroup), the per-pod claims (reserved for
//     their pods), the bindings, the PodGroup condition, and removes the
//     intent. The writes of a phase run in parallel (CommitParallelism); a
//     phase starts when the previous one succeeded. Every claim write
//     carries the resourceVersion the decision was made on; a conflict drops
//     the decision.
//   - Whoever finds an intent annotation finishes the commit when a member is
//     bound and rolls it back otherwise. Recovery runs before the first
//     attempt of every leadership term, and after any failed commit.
//   - Nothing here is global: metrics go to the registry in Config, clients
//     and informers are per Scheduler.
//
// See docs/design/commit.md.
package scheduler
