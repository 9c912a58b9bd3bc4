// Package trees is gpufabric-scheduler's room for CompositePodGroup trees
// (scheduling.k8s.io/v1alpha3, KEP-6012): it reads them from the
// scheduler's informers (which tree a PodGroup or a CompositePodGroup
// belongs to, the tree under a root, whether it is ready to be placed, the
// composite.Group the pure tree search places) and runs a tree's attempts
// (Cycle: the tree placed as one decision by pkg/gang/composite, its
// leaves committed as one transaction by the commit room, or refused).
// The loop routes tree keys and leaf PodGroups here; the room never
// imports the loop, which hands it what it needs in Deps.
//
// Files: reader.go (Reader: roots, reading a tree, its validation),
// ready.go (readiness, as kube-scheduler's GangScheduling plugin counts
// it, and the tree as a composite.Group), cycle.go (Cycle, Deps: an
// attempt read and built; Route for a leaf PodGroup), place.go (an
// attempt placed and committed, or refused), preempt.go (a refused
// tree's preemption through the evict room: its priority, held nodes, the
// tree search as the plan's placer), units.go (the evict room's view of
// trees, evict.Trees: the highest group with disruptionMode All above a
// running PodGroup, the leaves under a composite), lost.go (what a
// leaf's lost members restart: the composite disrupted only whole above
// it, the leaves under it).
//
// Rules:
//   - A tree is everything under a root CompositePodGroup of one
//     namespace (parents are named, never cross namespaces). A PodGroup
//     with a parent belongs to its tree and is never placed alone.
//   - What a tenant writes is bounded before it is walked: at most
//     composite.MaxDepth levels, composite.MaxChildren children per
//     composite, MaxLeaves PodGroups per tree; a cycle, a tree deeper or
//     wider than that, a parent that is a PodGroup, or groups of more than
//     one Workload make the tree invalid (ErrInvalid, with the object and
//     the field named), never a crash or an unbounded walk.
//   - A missing parent makes its subtree wait (ErrMissing), as
//     kube-scheduler keeps pods whose root is unknown.
//   - As kube-scheduler: a tree is placed when it places a pod; its
//     refusal is written as PodGroupInitiallyScheduled=False on every
//     leaf; CompositePodGroup status is not written (1.37.1 writes none),
//     events name the root.
//   - Priority and preemption (docs/design/preemption.md, "Trees"): a
//     tree's priority and policy are its root's (capped as a PodGroup's:
//     evict.Priorities.Tree); a tree the search refuses preempts as one
//     gang (the evict room, with the tree search planning in the domains
//     of its root's level), and does not see the nodes other gangs hold
//     against it. As a victim, a running leaf goes with the highest group
//     above it whose disruptionMode is All (Reader.Above), within the
//     same bounds as Read.
//   - Lost members (docs/design/composite.md): a leaf's own turn (the
//     loop's) replaces them in place with the leaf's policy, as a flat
//     gang's; its tree's next attempt places the replacements in the
//     leaf's pinned domain. A loss under a CompositePodGroup whose
//     disruptionMode is All restarts every leaf under it; while a leaf's
//     old members go (Members.Restarting) nothing of its tree is placed,
//     so the subtree is placed again as one decision. A failed leaf has
//     no members for its tree.
//   - A tree refused past the starvation bound reserves a domain of its
//     root's level as a flat gang does (the evict room; need: its leaves'
//     devices, preemption.Tree.Devices).
package trees
