// Package assume is gpufabric-scheduler's assume cache: the decisions being
// committed, or committed but not yet shown by the informers and the
// placement cache, which every snapshot adds so that two gangs never get
// the same device. An entry is one commit: one gang's decision, or a
// CompositePodGroup tree's leaves' decisions committed together.
//
// Files: cache.go (Cache, Entry, Part: the entries' life), shown.go
// (Shown: whether the informers show an entry's writes; the devices the
// entries hold).
//
// Rules: an entry is added in flight before the commit's first write (so
// later snapshots count its devices), completed when the commit succeeded
// and dropped when it failed (after its undo); a completed entry is
// dropped once, in the informers, every pod of its decisions is bound,
// gone, replaced, terminating or on a node that no longer exists, and
// every claim the commit wrote is gone, replaced, or at (or past) the
// resourceVersion the commit wrote; so a claim deallocated or deleted
// before the informers caught up ends the entry too. An entry in flight
// is never dropped by what the informers show. A Cache is safe for
// concurrent use.
package assume
