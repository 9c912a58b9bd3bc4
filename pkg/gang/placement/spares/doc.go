// Package spares keeps spare nodes per fabric domain for replacements: the
// operator's Policy (scheduler flags --spare-nodes-per-domain,
// --spare-level, --spares-for-new-gangs), the count of a domain's spares
// (Count, for the free-room view and kubectl gpufabric status), and the
// Guard the placement engine asks, one Place call at a time, whether a
// node is a spare a new gang may not take.
//
// Files: policy.go (Policy), count.go (NodeGPUs, Domain, Count), guard.go
// (Guard, its refusal text).
//
// Rules:
//   - A spare is a node of the spare-level domain with at least one GPU of
//     driver gpufabric.dev, none of its GPUs or MIG partitions allocated,
//     no device taint (NoSchedule, NoExecute) on a GPU, not cordoned and
//     without a NoSchedule/NoExecute taint of the node lifecycle
//     (node.kubernetes.io/...) or of gpufabric (gpufabric.dev/...): a
//     failing node is no spare.
//   - Of a domain's wholly free nodes (sorted by name) the last
//     Policy.PerDomain are kept (all of them when there are fewer). A new
//     gang never uses a kept node, so every domain keeps at least
//     min(PerDomain, its wholly free nodes before the gang) after it:
//     the check is exact however the gang spreads over domains
//     (multi-level gangs, segments, the joint device search), as every
//     node the engine considers passes the Guard first.
//   - A replacement may use them: a gang with members bound (late members
//     join their gang's domain) gets no Guard; a gang restarting whole may
//     use the spares of the domains its previous nodes are in.
//   - Pure and deterministic: no client-go, no clock, no map order. A
//     Guard computes a domain once, when a node of it is first asked
//     about: its cost is the asked domains' nodes and devices.
package spares
