// Package replace replaces a placed gang's lost members in place
// (docs/design/health.md, "Replace in place"): it says which members are
// lost and to which trigger, how long their replacement may take, and
// what the PodGroup's policy does when that bound passes; it deletes the
// lost pods of a Pod-mode gang (their controller recreates them, and the
// loop places the new pods as late members in the gang's domain), hands
// whole-gang restarts to the evict room (Restarts), fails a PodGroup
// whose policy is Fail, and records the MembersLost condition's words,
// the events and gpufabric_scheduler_member_replacement_seconds.
//
// Types and files:
//   - config.go: Config (the cluster defaults, validated) and the
//     PodGroup's annotations (Policy, Timeout).
//   - trigger.go: Trigger, Loss and Classify (pure: a member, its node and
//     a clock in, the loss out), Deletions (when nodes were deleted).
//   - replacer.go: Replacer, the turn of one placed gang and its bounded
//     memory per gang; turn.go: Turn (what the loop knows of the gang,
//     a tree's leaf included), Outcome, and what a turn reads of its
//     losses and waiting members; write.go: its writes (the lost
//     pods' evictions, the Failed condition) through the gate.
//   - domain.go: a restarting whole gang's previous NVLink domain (Prefer),
//     written into its condition by id and read back (Deps.Tree).
//   - metrics.go: Metrics.
//
// Rules:
//   - A member is lost when its node's Ready condition is False or
//     Unknown for Config.NodeFailureGrace, when its node carries a
//     NoExecute taint it does not tolerate (past its tolerationSeconds),
//     when its node was deleted, or when its phase is Failed. A pod
//     deleted by a user or its controller is not lost to a trigger.
//   - Every trigger time comes from objects (the node condition's
//     lastTransitionTime, the taint's timeAdded, the pod's status, the
//     MembersLost condition's lastTransitionTime), never from memory
//     alone, so a scheduler restart loses nothing; only a deleted node's
//     time is remembered (Deletions), and after a restart the condition's
//     time stands in for it.
//   - Memory is bounded: one entry per gang with a lost member (dropped
//     when its members run again or its PodGroup goes), at most maxLost
//     descriptions and maxPrefer nodes each; at most maxDeletions nodes.
//   - A whole gang restarting goes back to its previous domain when it
//     fits; when it does not, policy Restart lets it go wherever it fits
//     best, Wait and Fail keep it there (Stays), Fail until its bound.
//     Its previous NVLink domain (when its running members shared one) is
//     written into the MembersLost condition by id (quoted, at most 64
//     characters read back) and turned back into that domain's nodes
//     after a scheduler restart, so Prefer and Stays survive it.
//   - A tree's leaf (Turn.Leaf) is replaced in place as a flat gang is;
//     its restarted members are placed by its tree's search (no previous
//     domain is held). Under a CompositePodGroup whose disruptionMode is
//     All (Turn.WholeAbove) a loss restarts that composite whole: the
//     restart is asked for the composite's key and the loop restarts
//     every leaf under it.
//   - Every write passes the gate (gate.Gate.Check) first; this package
//     never imports the loop.
package replace
