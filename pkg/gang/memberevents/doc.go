// Package memberevents tells the waiting members of a PodGroup gang why
// their gang waits: one deduplicated, bounded event per member that points
// to the PodGroup's reason (Events). The scheduler's gang status
// (pkg/gang/scheduler) calls it; it was moved out of the loop unchanged.
//
// Rules:
//   - A note reaches at most PerChange members; a member is told a note
//     once, again only after Refresh or when the note changes.
//   - The note names only the PodGroup, in the pod's namespace, and quotes
//     the PodGroup's message cut short.
//   - Recording never blocks (report.Reporter).
package memberevents
