// Package inspect is the logic of `kubectl gpufabric`: pure functions from
// API objects (a Cluster: Nodes, ResourceSlices, ResourceClaims, Pods,
// PodGroups, Events, as listed) to report models, and the renderers that
// print a report as a table, JSON or YAML. Load lists the objects a report
// needs through client-go; everything else here does no I/O besides writing
// to the given io.Writer.
//
// Vocabulary (attribute names, the fabric tree of NVLink domains and node
// label levels, fabric-domain pools) comes from pkg/topology, so the reports
// group nodes exactly as gpufabric-scheduler does.
//
// Counting rules, shared by every report:
//   - a GPU is a device of driver gpufabric.dev with type=gpu in a node-local
//     pool, at the pool's newest generation;
//   - used: allocated by any ResourceClaim (whoever allocated it);
//   - tainted: not allocated, with a NoSchedule or NoExecute device taint;
//   - free: neither; total = used + tainted + free;
//   - a channel is a device of a fabric-domain pool (fabric-domain.<domain>);
//     used when allocated.
//
// Priorities are read with pkg/gang/preemption's pure helpers, and waiting
// PodGroups are numbered in the order of the scheduler's queue
// (pkg/gang/queue Rank: priority, then older, then key), so `status` and
// `explain` show the place the scheduler would give them.
//
// explain takes a PodGroup or a workload (KIND/NAME, WorkloadKinds):
// ResolveRef finds the workload's PodGroups from its pods' labels and the
// PodGroups' owners, never reading the workload object itself.
//
// A gang is the PodGroup of the pods a claim is reserved for (or the
// PodGroup itself, for shared claims), a pod without PodGroup, or, for a
// claim reserved for nobody, the claim. Its Job is the pods'
// batch.kubernetes.io/job-name label.
//
// A user who may not list the cluster gets the scheduler's free-room view
// instead (FreeRoomReport, pkg/gang/freeroom's format): free GPUs per
// fabric domain, nothing about workloads.
//
// Every list in a report is sorted; nothing depends on map order, so the
// same objects always give the same output.
package inspect
