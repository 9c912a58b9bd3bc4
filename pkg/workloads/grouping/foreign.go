package grouping

import (
	"fmt"
	"strconv"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// foreignPodGroup is what the mapping reads of a scheduler-plugins
// (scheduling.x-k8s.io/v1alpha1) or Volcano (scheduling.volcano.sh/v1beta1)
// PodGroup: both have spec.minMember; Volcano's has a priorityClassName.
type foreignPodGroup struct {
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		MinMember         int32  `json:"minMember,omitempty"`
		PriorityClassName string `json:"priorityClassName,omitempty"`
	} `json:"spec"`
}

// planForeign translates another gang API's PodGroup, the one
// PyTorchJob, MPIJob or KubeRay create with their gang options, into a
// native PodGroup (sp.<name>, volcano.<name>) owned by it: minCount is
// its minMember; gpufabric annotations on it apply. Its pods (which name
// it by label or annotation) name the native one when they are
// gpufabric-scheduler's. Members must be pods of the object that owns it
// (its controller), when it has one.
func planForeign(in Input) (*Plan, error) {
	var f foreignPodGroup
	if err := decode(in, &f); err != nil {
		return nil, err
	}
	prefix, api := PrefixSchedulerPlugins, "scheduler-plugins PodGroup"
	if in.Kind == KindVolcanoPodGroup {
		prefix, api = PrefixVolcano, "Volcano PodGroup"
	}
	name, ok := GroupName(prefix, f.Name)
	p := newPlan(in, &f.ObjectMeta, name)
	p.MemberOwnerUID = ""
	if c := metav1.GetControllerOf(&f); c != nil {
		p.MemberOwnerUID = c.UID
	}
	role := api + " " + f.Name
	if !ok {
		p.Problems = append(p.Problems, badName(role, name))
		return p, nil
	}
	o, problems := readOptions(role, f.Annotations)
	p.Problems = append(p.Problems, problems...)
	if f.Spec.MinMember < 1 {
		p.Problems = append(p.Problems, Problem{Message: fmt.Sprintf("%s: spec.minMember %d: a gang needs at least one member", role, f.Spec.MinMember)})
		return p, nil
	}
	if v, set := f.Annotations[AnnotationMinCount]; set && v != strconv.Itoa(int(f.Spec.MinMember)) {
		p.Problems = append(p.Problems, Problem{Annotation: AnnotationMinCount, Message: fmt.Sprintf(
			"%s: annotation %s %s conflicts with spec.minMember %d: remove the annotation, minMember is the gang's minCount", role, AnnotationMinCount, quote(v), f.Spec.MinMember)})
	}
	if len(o.claims) > 0 {
		p.Problems = append(p.Problems, Problem{Annotation: AnnotationGroupClaims, Message: fmt.Sprintf(
			"%s: annotation %s: gpufabric cannot see the pod templates of another API's PodGroup; create a scheduling.k8s.io PodGroup with resourceClaims instead", role, AnnotationGroupClaims)})
		o.claims = nil
	}
	o.minCount = 0
	g, more := gang(name, "gang", role, f.Spec.MinMember, o, nil)
	g.PriorityClassName = f.Spec.PriorityClassName
	p.Problems = append(p.Problems, more...)
	p.Groups = []Group{g}
	return p, nil
}
