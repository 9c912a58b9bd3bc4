// Package trees reads CompositePodGroup trees (scheduling.k8s.io/v1alpha3,
// KEP-6012) from the scheduler's informers: which tree a PodGroup or a
// CompositePodGroup belongs to, the tree under a root, whether it is
// ready to be placed, and the composite.Group the pure tree search
// (pkg/gang/composite) places. It writes nothing.
//
// Files: reader.go (Reader: roots, reading a tree, its validation),
// ready.go (readiness, as kube-scheduler's GangScheduling plugin counts
// it, and the tree as a composite.Group).
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
package trees
