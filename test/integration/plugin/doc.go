// Package plugin tests the kubelet plugin (cmd/kubelet-plugin) as a process
// in mock mode (the fabrics of pkg/devices/mock) against a real
// kube-apiserver with the plugin's shipped RBAC rules: the ResourceSlices
// it publishes, prepare and unprepare over the kubelet's gRPC API (CDI
// specs, IMEX channels, MIG partitions, driver files), device health and
// GPU events as taints, and a rolling update of two instances on one node.
// BenchmarkXIDToTaint measures an Xid's way to a device taint. Every test
// starts its own control plane.
package plugin
