// Package faults proves replace-in-place on the real control plane
// (kube-apiserver, kube-controller-manager with a 6 s node monitor grace
// period, kwok): Indexed Jobs run gangs of both disruption modes on kwok
// nodes, and their nodes fail under them the way the API sees it — a node
// stops heartbeating (Ready=Unknown, then the unreachable NoExecute taint),
// gets a NoExecute taint, is deleted, or a member pod fails. The Job
// controller creates the replacement pods; gpufabric-scheduler (the binary,
// the shipped RBAC rules) must place each replacement in its gang's NVLink
// domain (and its segment's) within the bound when there is room, and
// otherwise restart the gang whole or fail it as the PodGroup's
// gpufabric.dev/on-member-loss says; no gang in disruption mode All may run
// partly. The test logs the time from each fault to the replacement bound
// (docs/benchmarks.md).
//
// It has its own control plane, so `make test` runs it beside the longer
// scheduler package.
package faults
