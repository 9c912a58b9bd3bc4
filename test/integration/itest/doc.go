// Package itest holds what the integration test packages share: builders
// of the API objects they create, and harnesses on a control plane that
// test/integration/framework started.
//
// Files: builders.go (nodes, GPU slices, claims, PodGroups and their pods),
// cluster.go (fabric clusters of nodes and GPU slices, on kwok or not),
// gang.go (claim templates, gangs made from them, a namespace's gang read
// back and checked), faults.go (node faults under running gangs: stopped
// heartbeats, NoExecute taints, deleted nodes, failed pods), chart.go
// (helm, the chart rendered and applied, its service accounts' tokens),
// endpoints.go (tokens for the components' metrics ports, and requests to
// them), plugin.go (the mock fabrics and the kubelet plugin's identity),
// grouper.go (workload grouping: the pod-group policy, the grouper with the
// chart's rules, the scheduler's membership guard), testing.go (Must, Poll).
//
// Rules: test code only; no production binary links it (pkg/archtest).
// Helpers that set something up fail the test; reads and requests that
// tests poll or compare return errors.
package itest
