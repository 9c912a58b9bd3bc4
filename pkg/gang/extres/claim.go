package extres

import (
	"crypto/sha256"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// The special claim, as kube-scheduler 1.37 writes it: generateName
// <pod name>-extended-resources- (cut to 58 characters, as the apiserver
// cuts a generateName base), annotation
// resource.kubernetes.io/extended-resource-claim: "true", the pod as its
// controller owner, one request per DRA-backed extended resource and
// container. gpufabric-scheduler names it itself: the base and five
// characters derived from the pod's UID, from the apiserver's alphabet of
// generated names, so that a retry after a crash finds the claim it
// created instead of creating a second one.

// maxBase is the longest generateName base the apiserver keeps (a
// generated name is at most 63 characters: base and five random ones).
const maxBase = 58

// alphabet is the apiserver's alphabet of generated name suffixes (no
// vowels, no characters that look alike).
const alphabet = "bcdfghjklmnpqrstvwxz2456789"

// GenerateName is the special claim's generateName: <pod>-extended-resources-.
func GenerateName(p *v1.Pod) string { return p.Name + "-extended-resources-" }

// ClaimName is the name gpufabric-scheduler gives a pod's special claim:
// GenerateName cut to 58 characters, then five characters derived from
// the pod's UID.
func ClaimName(p *v1.Pod) string {
	base := GenerateName(p)
	if len(base) > maxBase {
		base = base[:maxBase]
	}
	sum := sha256.Sum256([]byte(p.UID))
	suffix := make([]byte, 5)
	for i := range suffix {
		suffix[i] = alphabet[int(sum[i])%len(alphabet)]
	}
	return base + string(suffix)
}

// NewClaim is the pod's special claim for r, as it is created.
func NewClaim(p *v1.Pod, r *Request) *resourceapi.ResourceClaim {
	return &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{
			Namespace:    p.Namespace,
			Name:         ClaimName(p),
			GenerateName: GenerateName(p),
			Annotations:  map[string]string{resourceapi.ExtendedResourceClaimAnnotation: "true"},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "v1", Kind: "Pod", Name: p.Name, UID: p.UID, Controller: ptr.To(true),
			}},
		},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: r.Requests}},
	}
}

// IsFor reports whether c is p's special claim, as kube-scheduler and
// kube-controller-manager recognize one: the annotation set to "true"
// and p (by name and UID) as its controller.
func IsFor(c *resourceapi.ResourceClaim, p *v1.Pod) bool {
	if c.Annotations[resourceapi.ExtendedResourceClaimAnnotation] != "true" {
		return false
	}
	owner := metav1.GetControllerOfNoCopy(c)
	return owner != nil && owner.APIVersion == "v1" && owner.Kind == "Pod" && owner.Name == p.Name && owner.UID == p.UID
}

// asks reports whether the claim asks exactly for r's requests (exact
// counts of a class, nothing more: no selectors, constraints, config,
// admin access, tolerations or capacity).
func asks(c *resourceapi.ResourceClaim, r *Request) bool {
	d := c.Spec.Devices
	if len(d.Requests) != len(r.Requests) || len(d.Constraints) > 0 || len(d.Config) > 0 {
		return false
	}
	for i, q := range d.Requests {
		e, w := q.Exactly, r.Requests[i].Exactly
		if q.Name != r.Requests[i].Name || e == nil || len(q.FirstAvailable) > 0 ||
			e.DeviceClassName != w.DeviceClassName || e.AllocationMode != w.AllocationMode || e.Count != w.Count ||
			len(e.Selectors) > 0 || ptr.Deref(e.AdminAccess, false) || len(e.Tolerations) > 0 || e.Capacity != nil {
			return false
		}
	}
	return true
}

// reservedOnlyFor reports whether the claim is reserved for nobody but
// the pod.
func reservedOnlyFor(c *resourceapi.ResourceClaim, p *v1.Pod) bool {
	for _, r := range c.Status.ReservedFor {
		if r.UID != p.UID {
			return false
		}
	}
	return true
}

// Status is the pod's status.extendedResourceClaimStatus for its claim.
func Status(claim string, r *Request) v1.PodExtendedResourceClaimStatus {
	return v1.PodExtendedResourceClaimStatus{ResourceClaimName: claim, RequestMappings: r.Mappings}
}
