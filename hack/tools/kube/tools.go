//go:build tools

// Package tools pins the Kubernetes control-plane commands that
// hack/build-control-plane.sh builds from the Go module proxy. It is kept out
// of the main go.mod: k8s.io/kubernetes needs replace directives.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
)
