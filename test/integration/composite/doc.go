// Package composite tests CompositePodGroup trees (scheduling.k8s.io
// v1alpha3, KEP-6012) placed by gpufabric-scheduler on a real control
// plane with the CompositePodGroup gate on: a tree placed as one decision
// (where the greedy sibling order dead-ends too), minGroupCount, a tree
// that waits for its members, an invalid tree refused with the field
// named, and late members joining their tree's domains.
package composite
