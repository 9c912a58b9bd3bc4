// Package extres proves KEP-5004 with gpufabric-scheduler on the real
// control plane (kube-apiserver, kube-controller-manager, kwok): unchanged
// Deployments, Jobs and pods asking `nvidia.com/gpu: N`, which the GPU
// DeviceClass names in spec.extendedResourceName, get N GPUs of one node
// through a ResourceClaim with kube-scheduler's shape, as a gang when they
// are one; their status.extendedResourceClaimStatus names it before they
// are bound; kube-controller-manager releases and deletes it with the pod;
// bad input (a pod asking more than any node or claim holds, a claim name
// taken by another object) is refused with the reason and loses nothing;
// and a scheduler killed before any write of such a commit recovers to
// all or nothing. The scheduler runs in the test process with the shipped
// RBAC rules. Its own control plane, so `make test` runs it beside the
// others.
package extres
