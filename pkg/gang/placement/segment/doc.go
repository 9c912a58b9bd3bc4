// Package segment plans hard segments, the placement engine's mechanism
// for a gang whose members form groups that must each lie in one domain of
// a lower level ("every 16 consecutive ranks in one NVLink domain"): which
// domains of that level (bins) inside the gang's domain hold which groups
// (segments). It is pure and knows nothing of Kubernetes: the engine
// (pkg/gang/placement) counts what fits in each bin, and verifies each
// bin's segments with the allocator through a Verifier.
//
// A segmented gang is the simplest tree of gangs: a parent constraint (the
// gang's domain) and children of one size at one level. CompositePodGroups
// are planned to reuse Plan with children of their own sizes.
//
// Rules:
//   - Bins with pinned segments (members of which already run there) are
//     always picked, first, in bin order.
//   - Free segments go in rank order to the fewest bins that hold them by
//     their counts, fullest first: each pick is the bin with the fewest
//     whole segments of room that, with the largest others, still holds
//     the rest (Kueue TAS's BestFit, as the engine's pack order); ties to
//     the smaller id.
//   - Counts are upper bounds: when a bin does not verify, its count drops
//     below what it was asked for and the plan is made again, keeping the
//     picks already verified that the new plan starts with. A count never
//     drops below what the bin verifies, so for segments whose bins answer
//     independently the plan is found whenever one exists.
//   - Budgets are counts (Request.MaxPlaces), never clocks; the same
//     Request and answers always give the same Result.
//
// Files: doc.go, plan.go (Plan and its types), choose.go (which bins hold
// the free segments).
package segment
