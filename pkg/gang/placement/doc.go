// Package placement is gpufabric's pure gang placement engine: one decision
// per gang on one immutable view of the cluster, with no client-go.
//
// Files: snapshot.go (Snapshot, SnapshotInput, Config), devices.go (per-node
// device index, class counts, Allocate wrapper), nodes.go (cheap per-node
// checks), gang.go (Gang and its builders), levels.go (candidate levels and
// the per-level domain index), place.go and attempt.go (domains, the
// greedy fill), firstalt.go (firstAvailable floors), search.go,
// searchbound.go and searchmemo.go (the search over member → node
// assignments where the greedy fill dead-ends), result.go (Decision,
// Unschedulable), assume.go (Snapshot.Assume).
//
// Rules:
//   - Place never calls the structured allocator with more than one node's
//     slices (plus the cluster-level slices that reach that node and hold a
//     device of a class the claims use), so it never hits the allocator's
//     exponential search over many pools.
//   - Domains are chosen from free-device counts, which are upper bounds;
//     every chosen node is then verified with the allocator, counting the
//     gang's own in-flight allocations.
//   - The same Snapshot and Gang always give the same result: every list is
//     sorted, no decision depends on map order, and the searches' budgets
//     are counts, not clocks (Config.AllocateTimeout aside).
//   - A Snapshot is not safe for concurrent use.
//
// See docs/design/placement.md.
package placement
