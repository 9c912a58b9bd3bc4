// Package grouper is gpufabric-grouper's controller: it watches the
// workload kinds pkg/workloads/grouping maps (only those the apiserver
// serves, found by discovery and checked again every minute: JobSet,
// LeaderWorkerSet, RayCluster, Indexed Jobs, scheduler-plugins' and
// Volcano's PodGroups, and the TrainJobs and RayJobs whose annotations
// apply to their JobSet or RayCluster) and creates each workload's
// Workload, PodGroups (and CompositePodGroups in composite mode) owned by
// it, so deleting the workload deletes them. The pods name their group
// themselves at creation (the chart's MutatingAdmissionPolicy, generated
// from the same rules).
//
// Rules:
//   - Idempotent: names are deterministic; a reconcile creates what is
//     missing, updates only what may change (minCount, the scheduler's
//     annotations), warns once about immutable fields it cannot change,
//     and deletes only its own objects (label app.kubernetes.io/managed-by
//     = gpufabric-grouper, controlled by the workload) that the plan no
//     longer has.
//   - Bad input loses nothing: a plan with problems (conflicting
//     annotations, a gang too large, a name that cannot be a PodGroup)
//     creates and changes nothing; the workload gets one Warning per
//     problem, naming the annotation. A group whose name another object
//     holds is left alone, with a Warning.
//   - The scheduler's reason why a group waits (Unschedulable) is copied
//     to the workload as a Warning, once per message.
//   - An Indexed Job the Job controller groups (a Workload it made:
//     gate WorkloadWithJob) is left to it; a new Job gets a grace for the
//     Job controller to act first.
//   - Bounded: a rate-limited queue (per-item backoff, 20/s overall), a
//     fixed number of workers, at most 8 events per reconcile, a bounded
//     memory of the messages reported (seen.go). Status-only updates of a
//     workload do not queue it.
//
// Files: grouper.go (Config, Grouper, the queue and workers), watches.go
// (informers, discovery, event handlers), reconcile.go (one workload:
// plan, problems, the Job controller's Jobs), apply.go (create, update,
// prune; mirroring the scheduler's reason), seen.go (message
// deduplication).
package grouper
