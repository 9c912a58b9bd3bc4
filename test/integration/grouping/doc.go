// Package grouping tests, on a real control plane, the workload grouping:
// the generated MutatingAdmissionPolicies on kube-apiserver v1.37.1 (the
// CEL names the group the Go mapping names), the grouper controller
// creating the Workload and PodGroups of hand-made workload objects
// (minimal CRDs written for the test), and gpufabric-scheduler placing
// their pods as gangs.
package grouping
