// Package fabricrank ranks a level's candidate domains by fabric health
// for the placement engine: a domain whose nodes have devices that report
// link trouble (topology.FabricSick: a positive fabricErrors attribute, an
// nvlink-degraded, fabric-errors or port-down taint) is sick, and a large
// gang tries every healthy domain before any sick one.
//
// Rules:
//   - Healthy first, each group in the order given (the engine's best
//     fit); deterministic, as the input order is.
//   - A domain's sickness is the sum of its nodes' sick devices, each
//     node's count cached on the snapshot (index.NodeState.FabricSick).
//   - A leaf of the engine: it imports pkg/topology and
//     pkg/gang/placement/index, never the engine (pkg/archtest).
//
// Files: rank.go (Order, Sick, Note). See docs/design/health.md, "Sick
// fabric".
package fabricrank
