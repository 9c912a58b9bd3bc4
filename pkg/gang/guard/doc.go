// Package guard is the double-allocation guard of gpufabric-scheduler: a
// controller beside the scheduling loop (as pkg/gang/domains is) that
// repairs devices allocated to two claims and holds the devices another
// scheduler forgot. It has its own goroutines and work queues, reads the
// scheduler's listers, and writes through the write gate; it never
// imports the loop (pkg/gang/scheduler), which builds it with New, feeds
// it with Watch and runs it with Run while this replica leads.
//
// Files: guard.go (Config, the Metrics and ClaimReleaser interfaces,
// Guard: New, Watch, Run, the claim events; IsHold), index.go (the index
// of allocated devices), repair.go (repair: the keeper, evictions,
// releases), hold.go (device holds).
//
// Rules, repair: another scheduler on the same cluster (kube-scheduler
// placing plain-claim pods) allocates from its own view: between one
// scheduler's claim write and the other's informer seeing it, both can
// pick the same device for different claims. The plugin prepares such a
// device for the first claim only, so the other claim's pod would wait in
// ContainerCreating forever.
//   - The guard finds every device of driver gpufabric.dev allocated to two
//     claims (fabric-domain channels included; admin-access results share
//     devices by design and are left out, and so are holds), keeps one
//     claim, and frees the others: their pods are evicted through the
//     Eviction API with an event (their controllers create them again, and
//     they are scheduled anew), and a claim reserved for a PodGroup, or for
//     nobody, is released (ClaimReleaser); a claim reserved for pods is
//     released by kube-controller-manager once they are gone.
//   - Which claim is kept: one whose consumer pods have started (the plugin
//     prepared it), else one of a gang (a PodGroup's shared claim or a
//     member's: evicting a member leaves the whole gang short, while a
//     plain pod's controller simply creates it again), else the one
//     allocated first (allocationTimestamp when both have it, else the
//     order this scheduler saw them allocated; claims that existed when
//     the informer listed are seen at the zero time), else the smaller UID.
//   - A double allocation is acted on only after it has lasted repairGrace,
//     so a write in flight is never mistaken for one.
//
// Rules, holds: kube-scheduler (v1.37) keeps the devices allocated in the
// cluster as a set fed by claim events: a claim's allocation inserts its
// devices, its deallocation or deletion removes them, whatever other
// claims hold. Once one device has been held by two claims, the loser's
// deallocation makes kube-scheduler forget a device the kept claim still
// holds, and it gives the device away again: repair and re-allocation
// would loop.
//   - So whenever a claim gives up a device another claim still holds, the
//     guard creates a hold: a ResourceClaim in RecordNamespace named
//     vocab.HoldPrefix*, with the holder's spec and allocation and no
//     consumer, label vocab.HoldLabel (the holder's UID) and annotation
//     vocab.HoldForAnnotation (its namespace/name). Its allocation is an
//     insert in kube-scheduler's set, after the removal (watch events of
//     one resource arrive in resourceVersion order).
//   - A hold is deleted once the claim it is for no longer holds devices;
//     if that deletion makes kube-scheduler forget a device some third
//     claim was given meanwhile, that claim gets a hold in turn.
//   - gpufabric's own accounting leaves holds out (IsHold): they duplicate
//     their claim's devices.
//
// Rules, writes: every write (eviction, hold created or deleted) passes
// the gate first; an error for which gate.Stops holds ends Run without
// retrying (the scheduler stops too), any other is retried with the
// work queue's rate limit.
//
// Locks: Guard.mu (claim names), allocIndex.mu and holdSet.mu are each
// taken alone, never one inside another; no lock is held across an API
// call or a lister read.
package guard
