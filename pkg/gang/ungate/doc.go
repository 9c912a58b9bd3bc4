// Package ungate remembers when each gang of gpufabric-scheduler saw the
// last scheduling gate of one of its members go: the start of
// gang_wait_seconds when it is later than the gang's creation (a gang Kueue
// gates until admission waits from its admission, not from its creation).
// kube-scheduler likewise moves a pod out of its gated set on the update
// that removes its last gate.
//
// Rules:
//   - An unbound, not deleting pod of gpufabric-scheduler seen without
//     gates is noted at the time of the event when its previous version had
//     gates (Times.Updated), or, first seen without gates, when its
//     PodScheduled condition still says SchedulingGated (Times.Added): the
//     apiserver sets that on a pod created gated, and nothing tried the pod
//     since its gates went, so they went while no leader watched. After a
//     restart or a leader change such a gang waits from the time the new
//     leader first saw it, as kube-scheduler's SLI restarts with its
//     process; a gang whose gates went before and that was tried since waits
//     from its creation (the caller's fallback).
//   - A gang keeps the latest time noted for any of its members.
//   - Bounded by its caller: one entry per gang, taken when the gang is
//     placed (Take) and forgotten when its PodGroup or its last pod is
//     deleted (Forget).
//
// Pure: pods in, times out; safe for concurrent use.
package ungate
