//go:build tools

// Package tools pins the KubeRay operator that
// hack/build-workload-controllers.sh builds from the Go module proxy for the
// integration tests. It has a module of its own: KubeRay pins k8s.io/* of
// Kubernetes 1.35 and controller-runtime v0.22, which the other workload
// controllers' module (hack/tools/workloads) would raise to v0.36 and v0.24.
package tools

import _ "github.com/ray-project/kuberay/ray-operator"
