// Package kubectl holds the golden tests of `kubectl gpufabric` on a real
// control plane (TestKubectlGpufabric). It is a package of its own because
// the plugin's k8s.io/cli-runtime pulls in Go's plugin package, which makes
// the linker bind every symbol at start (-z now), and test binaries that
// link go-nvml (test/integration/chart, through pkg/devices/mock) need its
// NVML symbols unresolved until the library is loaded.
package kubectl
