// Package workloads runs the workload controllers users put in front of
// gpufabric — JobSet, LeaderWorkerSet, Kubeflow Trainer v2 and KubeRay,
// the real binaries (hack/build-workload-controllers.sh) — against the real
// control plane (kube-apiserver, kube-controller-manager, kwok nodes) with
// gpufabric-scheduler, one control plane for all four and one smoke case
// each, in parallel. Each case creates a workload whose pod templates name
// gpufabric-scheduler and a GPU claim, and checks that the controller
// creates the pods it should with the labels and annotations gpufabric can
// read to group them (docs/design/workload-grouping.md, "What each
// controller writes on its pods"), ranks and indices included.
//
// None of these controllers creates a scheduling.k8s.io PodGroup, so today
// gpufabric-scheduler places each of their pods alone, with a
// PlacedWithoutGang Warning event that names the controller: the cases
// assert that behaviour, which workload grouping is to change.
package workloads
