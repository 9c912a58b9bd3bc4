// Package placement is gpufabric's pure gang placement engine: one decision
// per gang on one immutable view of the cluster (an index.Snapshot, from
// the leaf package pkg/gang/placement/index), with no client-go.
//
// Place is one call; newPlacer makes its pieces, each given the small
// structs it needs (the members' shapes, the cheap checks, the allocator
// calls, the refusals), never the placer itself:
//   - placer walks the levels and their domains in best-fit order and
//     reports (place.go, decision.go);
//   - fits answers the cheap per-node checks (nodes.go); allocator runs
//     Allocate calls inside the budget and through the gang's memory of
//     refused and timed-out calls (allocator.go, pkg/gang/placement/cost);
//   - filler verifies one domain: shared claims, balanced quotas, the
//     greedy fill and its fall-backs (fill.go, firstalt.go);
//   - packer orders a domain's nodes (packorder.go);
//   - searcher and search look for member → node assignments where the
//     greedy fill dead-ends (search.go, searchbound.go, searchjoint.go,
//     searchmemo.go);
//   - aligner verifies rail sets (rails.go); the leaf package
//     pkg/gang/placement/rails counts them (rails.Search), puts NICs on
//     their GPUs' rails (rails.Follower) and limits claims to rail sets
//     (rails.Copies), reading the members' shapes (rails.Members), the
//     cheap checks (fits, as rails.Fits) and the allocator (as
//     rails.Allocator);
//   - explainer says why the closest domains refused (explain.go);
//   - segmenter places a segmented gang's segments in the domains of
//     their level, one filler per domain, planned by the leaf package
//     pkg/gang/placement/segment (segments.go, segverify.go,
//     segexplain.go).
//
// Files: config.go (Config), gang.go (Gang and its builders; members in
// the order of the leaf package pkg/gang/placement/rank), shape.go (members and their shapes), podaffinity.go
// (Unsupported, the anti-affinity and volume checks' names), place.go
// (Place, placer), decision.go (Decision and Unschedulable from a Place,
// Assume), nodes.go (check names, fits), allocator.go (allocator, the
// Allocate seam and the call keys of the memory), timedout.go (TimedOut:
// refusals of a spent budget or of timed-out calls), attempt.go (a
// placement in progress), fill.go (filler), firstalt.go (firstAvailable
// floors), packorder.go (PackOrder, packer), spread.go (balanced quotas,
// Decision.Spread), search.go, searchbound.go, searchjoint.go and
// searchmemo.go (the member search), rails.go (aligner: verifying rail
// sets, CheckRailAlignment, CheckRailFollow), explain.go (explainer),
// result.go (Decision, Unschedulable, Stats, refusals), channels.go
// (fabric-domain channels only for gangs that use the domain's GPUs),
// segments.go (hard segments: rules, layout, segmenter), segverify.go
// (verifying a plan's picks), segexplain.go (SegmentPlacement, refusals of
// segments), extended.go (the note of a refusal for extended resources
// backed by DRA; the leaf pkg/gang/placement/extended has the rest).
//
// Rules:
//   - Domains are chosen from free-device counts, which are upper bounds;
//     every chosen node is then verified with the allocator
//     (index.Snapshot.Allocate), counting the gang's own in-flight
//     allocations.
//   - The same Snapshot, Config and Gang (with its Memory) always give the
//     same result: every list is sorted, no decision depends on map order,
//     and the searches' and the Place call's budgets are counts, not clocks
//     (index.Config.AllocateTimeout and Config.Budget.Deadline aside: both
//     are read through the Allocate seam, whose end times the budget
//     compares with its deadline).
//   - Place reads the snapshot and fills its caches; only Assume changes
//     what it holds. A Snapshot is not safe for concurrent use.
//   - A fabric-domain channel goes only to a gang one of whose members
//     uses a GPU of the channel's domain (channels.go): a decision that
//     hands one to a GPU-less gang is refused.
//   - The engine imports pkg/topology and its leaves (index, segment,
//     cost, spares, fabricrank, rails), never what uses it (pkg/archtest); the
//     leaves never import the engine. fits hides kept spares (CheckSpare)
//     from new gangs.
//
// See docs/design/placement.md.
package placement
