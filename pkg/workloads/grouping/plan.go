package grouping

import (
	"fmt"
	"hash/fnv"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
)

// Plan is what gangs a workload gets: a forest of groups (one root per
// gang; a root with children is a CompositePodGroup over them, in
// composite mode only), owned by the workload.
type Plan struct {
	Owner Owner
	// Kind of the workload.
	Kind Kind
	// Workload is the name of the scheduling.k8s.io Workload object.
	Workload string
	// MemberOwnerUID is the object every member's controller chain must
	// lead to (the workload; for a scheduler-plugins or Volcano PodGroup,
	// its controller), "" when none can be said.
	MemberOwnerUID types.UID
	// Labels go on every object of the plan: the workload's name under
	// the key its pods carry it (jobset.sigs.k8s.io/jobset-name, ...), so
	// `kubectl gpufabric explain jobset/NAME` finds the groups before any
	// pod exists; a RayJob's cluster's also carry the RayJob's name.
	Labels map[string]string
	Groups []Group
	// Problems, when any, mean nothing of the plan may be created: the
	// workload's options conflict or cannot be met (an event names each).
	Problems []Problem
	// Notes are choices the mapping made that the user should know (a
	// Normal event each).
	Notes []string
	// Warnings are what the user should change although the plan can be
	// created (a Warning event each).
	Warnings []string
}

// Owner is the workload object the groups belong to.
type Owner struct {
	APIVersion, Kind, Namespace, Name string
	UID                               types.UID
}

// Group is a gang (a PodGroup), or, with Children, a CompositePodGroup
// whose MinCount counts child groups.
type Group struct {
	Name string
	// Template is its template in the Workload: a DNS label.
	Template string
	// Role says which pods it holds, for messages ("replicated job
	// workers of JobSet train").
	Role string
	// Size is the pods it expects (leaf) or its child groups.
	Size              int32
	MinCount          int32
	TopologyKey       string
	DisruptionAll     bool
	PriorityClassName string
	// Annotations are the scheduler's PodGroup annotations (segments,
	// spread, rails, member loss) copied from the workload.
	Annotations map[string]string
	Claims      []schedulingv1beta1.PodGroupResourceClaim
	Children    []Group
}

// Problem is one reason a plan cannot be created: the annotation it is
// about ("" for the workload's spec) and a message that says what to
// change.
type Problem struct {
	Annotation string
	Message    string
}

func (p Problem) String() string { return p.Message }

// Leaves returns the plan's PodGroups (groups without children), in order.
func (p *Plan) Leaves() []Group {
	var out []Group
	var walk func([]Group)
	walk = func(gs []Group) {
		for _, g := range gs {
			if len(g.Children) == 0 {
				out = append(out, g)
			}
			walk(g.Children)
		}
	}
	walk(p.Groups)
	return out
}

// groupClaims builds the PodGroup claims named in names from the pod
// templates: each must name the claim the same way in every template.
func groupClaims(role string, names []string, templates []*corev1.PodTemplateSpec) ([]schedulingv1beta1.PodGroupResourceClaim, []Problem) {
	var out []schedulingv1beta1.PodGroupResourceClaim
	var problems []Problem
	for _, name := range names {
		var found *corev1.PodResourceClaim
		same := true
		for _, t := range templates {
			i := slices.IndexFunc(t.Spec.ResourceClaims, func(c corev1.PodResourceClaim) bool { return c.Name == name })
			if i < 0 {
				problems = append(problems, Problem{Annotation: AnnotationGroupClaims, Message: fmt.Sprintf(
					"%s: annotation %s: its pod template has no claim %s (spec.resourceClaims): a group claim is named by every member", role, AnnotationGroupClaims, quote(name))})
				same = false
				break
			}
			c := &t.Spec.ResourceClaims[i]
			if found != nil && (deref(found.ResourceClaimName) != deref(c.ResourceClaimName) || deref(found.ResourceClaimTemplateName) != deref(c.ResourceClaimTemplateName)) {
				problems = append(problems, Problem{Annotation: AnnotationGroupClaims, Message: fmt.Sprintf(
					"%s: annotation %s: claim %s comes from different claims or templates in its pod templates", role, AnnotationGroupClaims, quote(name))})
				same = false
				break
			}
			found = c
		}
		if same && found != nil {
			out = append(out, schedulingv1beta1.PodGroupResourceClaim{Name: name,
				ResourceClaimName: found.ResourceClaimName, ResourceClaimTemplateName: found.ResourceClaimTemplateName})
		}
	}
	return out, problems
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// templateName makes s a DNS label for a Workload template: s itself when
// it is one, else a cleaned, cut form with a hash of s.
func templateName(s string) string {
	if len(validation.IsDNS1123Label(s)) == 0 {
		return s
	}
	b := []byte(strings.ToLower(s))
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9') {
			b[i] = '-'
		}
	}
	clean := strings.Trim(string(b), "-")
	if len(clean) > 50 {
		clean = strings.TrimRight(clean[:50], "-")
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(s))
	if clean == "" {
		return fmt.Sprintf("t-%08x", h.Sum32())
	}
	return fmt.Sprintf("%s-%08x", clean, h.Sum32())
}
