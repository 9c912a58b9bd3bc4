// Package kubectl holds the golden tests of `kubectl gpufabric` on a real
// control plane (TestKubectlGpufabric). It is apart from test/integration
// because the plugin's k8s.io/cli-runtime pulls in Go's plugin package,
// which makes the linker bind every symbol at start (-z now), and the
// integration test binary also links go-nvml, whose NVML symbols must stay
// unresolved until the library is loaded.
package kubectl
