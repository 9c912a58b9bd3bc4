// Package placement is gpufabric's pure gang placement engine: one decision
// per gang on one immutable view of the cluster (an index.Snapshot), with
// no client-go.
//
// Rules:
//   - Domains are chosen from free-device counts, which are upper bounds;
//     every chosen node is then verified with the allocator
//     (index.Snapshot.Allocate), counting the gang's own in-flight
//     allocations.
//   - The same Snapshot, Config and Gang always give the same result: every
//     list is sorted, no decision depends on map order, and the searches'
//     budgets are counts, not clocks (index.Config.AllocateTimeout aside).
//   - Place reads the snapshot and fills its caches; only Assume changes
//     what it holds. A Snapshot is not safe for concurrent use.
//
// See docs/design/placement.md.
package placement
