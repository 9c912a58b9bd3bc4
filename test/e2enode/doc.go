// Package e2enode runs gpufabric's kubelet plugin on a real node: kubelet
// v1.37.1, containerd 2.x and runc run a pod whose container gets the CDI
// devices the plugin prepared from a mock node (make e2e-node). It needs
// root, cgroups, overlayfs and the binaries of hack/build-node.sh; without
// $GPUFABRIC_NODE_BIN its test is skipped.
package e2enode
