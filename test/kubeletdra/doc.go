// Package kubeletdra drives the gpufabric kubelet plugin with the real
// kubelet DRA manager (k8s.io/kubernetes/pkg/kubelet/cm/dra). It is a module
// of its own because k8s.io/kubernetes needs replace directives that the main
// module must not carry.
package kubeletdra
