package extres

import (
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"
)

// TestClaimName: <pod>-extended-resources- cut to 58 characters, then five
// characters of the apiserver's alphabet derived from the pod's UID: the
// same pod always gets the same valid name, another UID another one.
func TestClaimName(t *testing.T) {
	pod := func(name string, uid types.UID) *v1.Pod {
		return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: uid}}
	}
	long := strings.Repeat("x", 100)
	tests := []struct {
		pod        *v1.Pod
		wantPrefix string
	}{
		{pod("train-0", "uid-1"), "train-0-extended-resources-"},
		{pod(long, "uid-1"), long[:58]},
		{pod("job.with.dots-7", "uid-2"), "job.with.dots-7-extended-resources-"},
	}
	for _, tc := range tests {
		name := ClaimName(tc.pod)
		suffix, ok := strings.CutPrefix(name, tc.wantPrefix)
		if !ok || len(suffix) != 5 || strings.Trim(suffix, alphabet) != "" {
			t.Errorf("ClaimName(%s) = %q, want %q and 5 characters of %q", tc.pod.Name, name, tc.wantPrefix, alphabet)
		}
		if msgs := validation.IsDNS1123Subdomain(name); len(msgs) > 0 || len(name) > 63 {
			t.Errorf("ClaimName(%s) = %q is not a valid short name: %v", tc.pod.Name, name, msgs)
		}
		if again := ClaimName(tc.pod.DeepCopy()); again != name {
			t.Errorf("ClaimName changed: %q, then %q", name, again)
		}
		other := tc.pod.DeepCopy()
		other.UID += "-recreated"
		if ClaimName(other) == name {
			t.Errorf("a pod of the same name with another UID gets the same claim name %q", name)
		}
	}
}

// TestIsFor: the annotation and the pod as controller (name and UID), as
// kube-controller-manager and kube-scheduler recognize a special claim.
func TestIsFor(t *testing.T) {
	p := podWith(nil, container("train", "nvidia.com/gpu", 1))
	mine := NewClaim(p, &Request{})
	if !IsFor(mine, p) {
		t.Fatalf("the pod's own new claim is not its special claim: %+v", mine.ObjectMeta)
	}
	if mine.GenerateName != "p-extended-resources-" || mine.Annotations[resourceapi.ExtendedResourceClaimAnnotation] != "true" {
		t.Errorf("claim metadata %+v lacks the upstream generateName or annotation", mine.ObjectMeta)
	}
	tests := map[string]func(c *resourceapi.ResourceClaim){
		"no annotation": func(c *resourceapi.ResourceClaim) { c.Annotations = nil },
		"annotation false": func(c *resourceapi.ResourceClaim) {
			c.Annotations[resourceapi.ExtendedResourceClaimAnnotation] = "false"
		},
		"another pod's UID":    func(c *resourceapi.ResourceClaim) { c.OwnerReferences[0].UID = "uid-other" },
		"owner not controller": func(c *resourceapi.ResourceClaim) { c.OwnerReferences[0].Controller = ptr.To(false) },
		"owned by a Job": func(c *resourceapi.ResourceClaim) {
			c.OwnerReferences[0].Kind, c.OwnerReferences[0].APIVersion = "Job", "batch/v1"
		},
	}
	for name, change := range tests {
		c := mine.DeepCopy()
		change(c)
		if IsFor(c, p) {
			t.Errorf("%s: IsFor = true", name)
		}
	}
}
