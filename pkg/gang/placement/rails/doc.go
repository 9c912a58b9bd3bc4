// Package rails is the placement engine's IB rail search (issue 13,
// "rails done fully"): which rail sets a gang's members can all use in a
// domain, by counts (Search), NICs that follow their GPUs' rails on a node
// (Follower), and member claims limited to a rail set (Copies). It is pure
// and knows nothing of the engine (pkg/gang/placement), which verifies the
// rail sets by placing the gang again (its aligner) and gives this package
// what it reads through small types: the members' shapes (Members), the
// cheap per-node checks (Fits), the allocator (Allocator) and the
// counters to add to (Stats).
//
// Rules:
//   - It imports pkg/topology and the cluster index
//     (pkg/gang/placement/index), never the engine (pkg/archtest).
//   - Budgets are counts, never clocks: MaxCandidates rail sets counted
//     per domain (and per member and node), MaxFollowCalls Allocate calls
//     per member and node to put its NICs on its GPUs' rails; a cut counts
//     in Stats.Cutoffs.
//   - The same snapshot, members and answers give the same result: rail
//     sets are enumerated in a fixed order, groups and candidates sorted,
//     no decision depends on map order.
//   - A Follower and a Copies belong to one Place call (their caches are
//     not safe for concurrent use); shapes and claims given are never
//     changed, only copied.
//
// The rules of each search are at its code: search.go (rail sets across
// members), follow.go (NICs follow GPUs), claims.go (rail-limited claim
// copies).
//
// Files: doc.go, members.go (Members, Shape and the engine's seams:
// Allocator, Fits, Stats), search.go (Search, Cand, Sets, RestrictOld),
// follow.go (Follower), claims.go (Copies, Selector, Key), count.go (free
// devices by rail: Counts, NodeRails, Members.Fit, EnumSets).
package rails
