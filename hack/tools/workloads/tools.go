//go:build tools

// Package tools pins the JobSet controller, the LeaderWorkerSet controller
// and the Kubeflow Trainer v2 controller manager that
// hack/build-workload-controllers.sh builds from the Go module proxy for the
// integration tests. One module for the three: they pin the same k8s.io
// v0.36 and controller-runtime v0.24, which then compile once. It is kept
// out of the main go.mod: they pin k8s.io/* of an older minor.
package tools

import (
	_ "github.com/kubeflow/trainer/v2/cmd/trainer-controller-manager"
	_ "sigs.k8s.io/jobset"
	_ "sigs.k8s.io/lws/cmd"
)
