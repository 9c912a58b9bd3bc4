// Package objtest builds the small API objects that the scheduler rooms'
// unit tests share (the loop's, commit's and guard's): claims with an
// allocation and consumers, and bare pods, all in namespace "ns" with
// UID "uid-<name>". Tests only: production code never imports it
// (pkg/archtest checks the binaries).
package objtest

import (
	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Claim is claim ns/name, allocated (with an empty allocation) when
// allocated is set, reserved for the given consumer UIDs.
func Claim(name string, allocated bool, reservedFor ...types.UID) *resourceapi.ResourceClaim {
	c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name)}}
	if allocated {
		c.Status.Allocation = &resourceapi.AllocationResult{}
	}
	for _, u := range reservedFor {
		c.Status.ReservedFor = append(c.Status.ReservedFor, resourceapi.ResourceClaimConsumerReference{UID: u})
	}
	return c
}

// Pod is pod ns/name.
func Pod(name string) *v1.Pod {
	return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name)}}
}
