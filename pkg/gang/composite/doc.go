// Package composite places a CompositePodGroup tree (scheduling.k8s.io
// v1alpha3, KEP-6012) as one decision on one snapshot: every child inside
// its parent's domain at the parent's level, each leaf PodGroup a gang in
// its own domain, at least each composite's minGroupCount of children or
// nothing. It is pure like the engine it drives (pkg/gang/placement):
// a tree and a snapshot in, a decision or a refusal out; no client-go, no
// clock.
//
// Files: group.go (Group, the tree and its validation), place.go (Place,
// the search over the tree), scopes.go (the domains a child is tried in,
// the running subtrees' pins, a domain less a node, what free devices
// rule out), result.go (Decision, Unschedulable, the
// refusal's words), coupling.go (coupled roles: rail couplings across a
// tree's leaves, coupler, Coupled).
//
// Rules:
//   - Kubernetes 1.37's semantics where it defines them: a composite is
//     placed when at least MinGroupCount children are (children that
//     already run count); a leaf when its gang is (placement.Place: all
//     members, or at least minCount); a child goes only inside its
//     parent's domain; a subtree with running members is pinned to their
//     domain; late children and members join there or wait.
//   - Where gpufabric does better (docs/design/composite.md): siblings are
//     searched jointly, with backtracking over the domains each child is
//     tried in, so a tree is placed where a greedy sibling order dead-ends;
//     the most children that fit are placed, never fewer than the greedy
//     order would; domains are chosen best-fit from free-device counts and
//     every placement is verified by the engine; ties are broken by domain
//     id, never at random.
//   - Coupled roles (gpufabric.dev/rail-coupling on a composite): the
//     leaves below it that ask for devices use one set of IB rails, fixed
//     by the first of them placed (coupling.go has the rules); a required
//     coupling that cannot hold refuses the tree, naming the set.
//   - Deterministic: the same tree, snapshot and Options give the same
//     result. The search is bounded by Options.PlaceCalls (Place calls of
//     the engine per tree): when it runs out, the greedy order's result
//     stands (or the refusal says the budget ran out).
//   - Place leaves the snapshot as it found it (index.Snapshot.Mark and
//     Rollback); the caller assumes the leaves' decisions.
package composite
