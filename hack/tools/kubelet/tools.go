//go:build tools

// Package tools pins the kubelet that hack/build-node.sh builds from the Go
// module proxy for the real-node test (make e2e-node). Like hack/tools/kube
// it needs k8s.io/kubernetes' replace directives, so it is a module of its
// own; it stays apart from the control-plane helper so that building the
// kubelet never changes the control plane's go.sum.
package tools

import _ "k8s.io/kubernetes/cmd/kubelet"
