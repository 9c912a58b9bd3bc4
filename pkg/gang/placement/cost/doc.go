// Package cost is the placement engine's cost model: what one placement
// attempt may spend on Allocate calls (Budget, counted by a Meter), which
// claim spent it (Blame), and what a gang's attempts remember of the calls
// that were refused or ran out of time (Memory, kept per gang by Memories),
// so that neither the same attempt nor the next ones pay for them again.
// The engine (pkg/gang/placement) asks it; the scheduler holds the
// Memories and sets the budget.
//
// Files: budget.go (Budget, Meter, Blame), memory.go (Verdict, Key,
// Memory), memories.go (Memories), claims.go (claim weights, digests and
// short names).
//
// Rules:
//   - Pure and deterministic: no client-go, no clock. A Budget is data (a
//     count and a deadline); a Meter compares the deadline with the end
//     times the allocator reports (index.Allocation.End), so the same calls
//     with the same reported times always spend the budget at the same
//     call. The call count is the deterministic bound; the deadline is the
//     safety net for slow calls.
//   - A remembered refusal is exact: it is keyed by the claims and the
//     node's free devices by content (index.FreeDeviceKey), which decide
//     the allocator's answer. A remembered timeout is a cost judgement: it
//     is keyed by the claims and the node's device shapes
//     (index.ShapeKey), which decide what the claims' selectors cost; it
//     counts once TimedOutConfirmations calls ran out of time (one may be
//     the machine's fault), and it is kept for TimedOutAttempts attempts.
//   - Everything is bounded: MaxEntries verdicts per gang (oldest dropped
//     first), and a Memories store holds at most its size of gangs (least
//     recently used dropped first), only those whose memory holds
//     verdicts. A Memory forgets everything when the
//     allocator's inputs besides nodes and claims change
//     (index.Snapshot.AllocatorKey: DeviceClasses, features, timeout).
//   - A Memory and a Meter serve one Place call at a time (not safe for
//     concurrent use); Memories is.
//
// See docs/design/cost.md.
package cost
