// Package commit is gpufabric-scheduler's commit room: it writes a placed
// gang's Decision to the API as a transaction (Txn), or the decisions of
// the placed leaf PodGroups of a CompositePodGroup tree as one (BeginTree),
// keeps the scheduler's records (Store: commit records, and the evict
// room's nomination records), and finishes or rolls back the commits a
// crash or a failed undo left half done (recovery). The loop
// (pkg/gang/scheduler) builds one Committer per leadership term and hands
// it what it needs: the client, the listers, the gate, the reporter,
// metrics and a Conditions writer. It never imports the loop.
//
// Files: commit.go (Committer, Config, Begin, BeginTree, the record,
// claim and binding writes), tree.go (Root and Leaf: what a tree's commit
// is made of, and the checks BeginTree makes), txn.go (Txn: the write
// protocol and its phases, the claim writes planned over all leaves, Run
// and Undo; messages), record.go (the commit record a commit writes, the
// records this term knows; what a record holds, its validation and its
// JSON are the leaf pkg/gang/commit/recordwire's), recordfits.go
// (RecordFits and RecordFitsTree: the largest gang or tree a record
// holds), chunks.go (records in parts: written, read and deleted as one),
// store.go (Store: create, delete, list and reject records; strict
// decoding and validation helpers shared with nominations), recover.go
// (recovery: roll back,
// release claims), finish.go (roll forward), pipeline.go (commits beside
// the worker), parallel.go (the writers of one phase), metrics.go (commit
// and recovery metrics), extstatus.go (the pods'
// status.extendedResourceClaimStatus, and what recovery checks of it).
//
// Rules:
//   - A PodGroup commit writes, in phases: the commit record, the shared
//     claims (reserved for the PodGroup), the per-pod claims (reserved for
//     their pods; a pod's special claim for its extended resources backed
//     by DRA among them), the pods' status.extendedResourceClaimStatus
//     (naming that claim), the bindings, the PodGroup condition, and
//     deletes the record. A gang of one has no record and no condition. A
//     tree's commit is one transaction over its placed leaves: one record,
//     named by the root CompositePodGroup's UID, and each phase over every
//     leaf (each leaf's shared claims reserved for its own PodGroup, each
//     leaf's condition); a claim has one write for all the leaves. The
//     writes of a phase run in parallel (Config.Parallelism); a phase
//     starts when the previous one succeeded, so "a member is bound"
//     implies "every claim write is done". Every claim write carries the
//     resourceVersion the decision was made on; a conflict drops the
//     decision (ErrConflict).
//   - Every write passes the gate (gate.Gate.Check) right before it starts.
//     An error that stops the scheduler (gate.Stops: a lost Lease, a crash
//     test's hook) returns at once, once the writes already started have
//     returned, and nothing is undone: the next leader's recovery finishes
//     or rolls back what is left.
//   - A failed Run is undone at once (Txn.Undo), by the recovery rules.
//   - Records live in the scheduler's own namespace, which only its
//     identity may write. A record is decoded strictly (no unknown fields,
//     no trailing data, bounded) and validated before it is acted on; one
//     that fails is reported (CommitRecordRejected) and deleted, never
//     acted on. A record larger than one object is split into parts
//     written before its head and read back whole (SHA-256 checked): a
//     partial set is invalid as a whole. A record is validated before it
//     is written, and an undo acts on the record its commit wrote, so the
//     scheduler never rejects its own record.
//   - A gang (a tree) whose record could not be written (more than
//     MaxRecordPods members, MaxRecordClaims claims, MaxRecordGroups
//     leaves, or MaxRecordTotalBytes of JSON) is refused before it is
//     placed (RecordFits, RecordFitsTree).
//   - A claim has at most one write per commit, reserving it for every
//     consumer the commit adds (the PodGroup, or the members sharing it).
//   - Recovery runs before the first attempt of every leadership term
//     (RecoverAll), and for one gang whenever its attempt finds its record
//     (RecoverRecord). It decides from live reads: a PodGroup commit is
//     finished when a member it names is bound, else rolled back; a
//     tree's, as a whole, when a member of any leaf is bound (a leaf whose
//     PodGroup is gone is then rolled back, and a leaf that fails never
//     stops the others). An allocation is cleared only when no
//     reservation is left and it is the one the record's fingerprint
//     names. Then every claim reserved for an unbound pod of ours is
//     released. One gang's failure never stops the others.
//   - Commits run beside the worker (Pipeline, up to CommitsInFlight); the
//     first error that stops the scheduler is kept and every later write
//     of every commit fails on it.
//   - The PodGroup condition a commit writes goes through Conditions (the
//     loop owns the condition's rules); events go through the reporter.
//
// The assume cache (the decisions being committed, or committed but not yet
// shown by the informers and the placement cache) stays in the loop
// (the loop's snapshots): it is part of what a snapshot is made of, its end rules
// read the informers' listers and the placement cache, and every attempt
// and the metrics loop read it. A commit neither reads nor writes it: the
// loop adds the decision in flight before Run and completes or drops it
// from Run's result (Txn.Written, ErrConflict).
//
// See docs/design/commit.md.
package commit
