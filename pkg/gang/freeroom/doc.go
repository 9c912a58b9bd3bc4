// Package freeroom publishes the free-room view: for a tenant who may not
// list nodes, ResourceSlices or claims cluster-wide, whether there is room
// per fabric domain. The leader writes it to the ConfigMap
// gpufabric-free-room of its own namespace; the chart lets a configurable
// group (all authenticated users by default) get that one ConfigMap, and
// `kubectl gpufabric status` falls back to it when listing is forbidden.
//
// Rules:
//   - The view holds counts of GPUs per fabric domain, per level of the
//     fabric tree, and the time they were taken; nothing about tenants (no
//     namespace, workload or per-tenant count): Build's inputs are the tree
//     and the free GPUs per NVLink domain only.
//   - Bounded whatever the cluster's size: per level the totals, the
//     largest free domain, the domains with at least 1, 2, 4, … GPUs free,
//     and the TopK domains with the most free by name (MaxLevels levels,
//     MaxBytes encoded).
//   - Free GPUs are the scheduler's (gpufabric_scheduler_free_gpus): no
//     claim allocated them, committed or assumed; a device-tainted GPU
//     counts as free.
//   - Written only when its counts changed, at most once per interval, by
//     server-side apply, and only while the fence holds; a failed write is
//     retried at the next interval and never stops the scheduler.
//   - Spare nodes the scheduler keeps for replacements
//     (--spare-nodes-per-domain) are no free room for a tenant's new gang:
//     their GPUs are taken off the free ones and only their sum is shown
//     (View.Spares), counted as pkg/gang/placement/spares counts them from
//     the nodes, slices and claims (ListerGPUs).
//   - Owned by the fabric-domain DeviceClass (ClassOwner), as the pools and
//     the Lease: it goes with `helm uninstall`.
//
// Files: view.go (View, Build, Encode, Decode), publisher.go (Run),
// source.go (ListerTree, the tree from listers, rebuilt on change;
// ClassOwner), spares.go (Spares, ListerGPUs: the kept spares).
package freeroom
