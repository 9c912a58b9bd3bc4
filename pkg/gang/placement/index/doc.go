// Package index is the placement engine's view of the cluster: one
// Snapshot of nodes, their load and devices, indexed for the questions the
// engine (pkg/gang/placement) asks, and the Cache that keeps snapshots up
// to date from informer events. It knows nothing of gangs or decisions.
//
// Files: snapshot.go (Config, SnapshotInput, Snapshot: building it, its
// accessors and AllocatorKey), node.go (NodeState, ResList, a node's
// device index), devices.go (the device queries: matching and free
// devices, the cluster-level slices a node sees, Allocate and InFlight,
// free-device and shape keys, taints and pool holders), changes.go (what
// changes a snapshot: Assume, and the node and global refreshes of
// Cache.Update; Mark, Rollback and Release, which undo Assume calls for a
// search over several gangs), levels.go (levels of a gang's topology keys, LevelIndex,
// warm-up), classes.go (DeviceClasses and CEL matching), matchcache.go
// (MatchCache: matches across snapshots), trim.go (slices trimmed to one
// class for the allocator), shape.go (device shapes, for ShapeKey and the
// engine's cost model), anti.go (required pod anti-affinity terms and
// their index), cache.go (Cache), cache_gpus.go (Cache.FreeGPUs).
//
// Rules:
//   - A leaf: it imports pkg/topology and Kubernetes libraries, never the
//     engine above it, and never client-go (pkg/archtest). Its black-box
//     tests (package index_test) check it through the engine it serves:
//     the engine decides the same on a snapshot Cache.Update keeps as on a
//     fresh one, on a warmed one as on a cold one.
//   - Allocate never gives the structured allocator more than one node's
//     slices (plus the cluster-level slices that reach that node and hold
//     a device of a class the claims use), so it never hits the
//     allocator's exponential search over many pools.
//   - Free-device counts are upper bounds (class selectors only); Unbounded
//     when a cluster-level pool has devices of the class.
//   - Deterministic: every list is sorted, nothing depends on map order.
//   - What a snapshot computes on first use (class matches, free counts,
//     level indexes, trimmed slices) is cached on it and changes no answer;
//     Assume, Rollback and Cache.Update keep the caches consistent with
//     the state. A snapshot rolled back to a Mark answers as it did then.
//   - A Snapshot is not safe for concurrent use; a Cache and a MatchCache
//     are. Accessors return the snapshot's own data: callers must not
//     modify it.
//
// See docs/design/placement.md and docs/design/snapshot-cache.md.
package index
