package grouping

import (
	"fmt"
	"maps"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// jobSpec is what the mapping reads of a batch/v1 JobSpec.
type jobSpec struct {
	Parallelism    *int32                 `json:"parallelism,omitempty"`
	Completions    *int32                 `json:"completions,omitempty"`
	CompletionMode *string                `json:"completionMode,omitempty"`
	Template       corev1.PodTemplateSpec `json:"template"`
	// Scheduling is spec.scheduling (WorkloadWithJob): the Job
	// controller makes the Job's gang.
	Scheduling map[string]any `json:"scheduling,omitempty"`
}

// jobSet is what the mapping reads of a jobset.x-k8s.io/v1alpha2 JobSet.
type jobSet struct {
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		ReplicatedJobs []replicatedJob `json:"replicatedJobs"`
	} `json:"spec"`
}

type replicatedJob struct {
	Name      string   `json:"name"`
	Replicas  *int32   `json:"replicas,omitempty"`
	DependsOn []any    `json:"dependsOn,omitempty"`
	Template  jobTempl `json:"template"`
}

type jobTempl struct {
	metav1.ObjectMeta `json:"metadata"`
	Spec              jobSpec `json:"spec"`
}

// planJobSet: one gang per replicated job (replicas × pods per Job,
// jobset.<jobset>.<replicated job>), what its pods can name from their
// own labels; replicated jobs that run one after the other (dependsOn,
// a TrainJob's initializers) are never one gang. In composite mode a
// JobSet of several such gangs gets a CompositePodGroup jobset.<jobset>
// over them whose gang counts the replicated jobs that start together
// (those without dependsOn).
//
// Options: the TrainJob's, the JobSet's, then each replicated job's Job
// template annotations (spec.replicatedJobs[].template.metadata). A
// gpufabric.dev/min-count on the JobSet of several gangs is ambiguous: set
// it per replicated job.
func planJobSet(in Input) (*Plan, error) {
	var js jobSet
	if err := decode(in, &js); err != nil {
		return nil, err
	}
	root := PrefixJobSet + "." + js.Name
	p := newPlan(in, &js.ObjectMeta, root)
	p.Labels = map[string]string{LabelJobSetName: js.Name}
	var gangs []Group
	first := int32(0)
	for i := range js.Spec.ReplicatedJobs {
		rj := &js.Spec.ReplicatedJobs[i]
		t := &rj.Template.Spec.Template
		if !ours(t, in) {
			continue
		}
		role := fmt.Sprintf("replicated job %s of JobSet %s", rj.Name, js.Name)
		name, ok := GroupName(PrefixJobSet, js.Name, rj.Name)
		if !ok {
			p.Problems = append(p.Problems, badName(role, name))
			continue
		}
		size := int32Or(rj.Replicas, 1) * podsPerJob(rj.Template.Spec.Parallelism, rj.Template.Spec.Completions)
		if size <= 0 {
			continue
		}
		o, problems := readOptions(role, in.ParentAnnotations, js.Annotations, rj.Template.Annotations)
		g, more := gang(name, templateName(rj.Name), role, size, o, []*corev1.PodTemplateSpec{t})
		p.Problems = append(p.Problems, append(problems, more...)...)
		gangs = append(gangs, g)
		if len(rj.DependsOn) == 0 {
			first++
		}
	}
	if len(gangs) == 0 {
		return nil, nil
	}
	if len(gangs) > 1 && (hasKey(js.Annotations, AnnotationMinCount) || hasKey(in.ParentAnnotations, AnnotationMinCount)) && !everyOwn(js.Spec.ReplicatedJobs, in) {
		p.Problems = append(p.Problems, Problem{Annotation: AnnotationMinCount, Message: fmt.Sprintf(
			"JobSet %s: annotation %s on the JobSet is ambiguous with %d gangs (one per replicated job): set it on each replicated job's Job template (spec.replicatedJobs[].template.metadata.annotations)",
			js.Name, AnnotationMinCount, len(gangs))})
	}
	if len(gangs) > MaxGroups {
		p.Problems = append(p.Problems, Problem{Message: fmt.Sprintf("JobSet %s: %d replicated jobs, more than the %d groups a workload may have", js.Name, len(gangs), MaxGroups)})
	}
	if in.Mode == ModeComposite && len(gangs) > 1 {
		o, _ := readOptions("JobSet "+js.Name, in.ParentAnnotations, js.Annotations)
		p.Groups = []Group{{Name: root, Template: "jobset", Role: "JobSet " + js.Name, Size: int32(len(gangs)), MinCount: max(first, 1),
			TopologyKey: o.topologyKey, PriorityClassName: gangs[0].PriorityClassName, Children: gangs}}
		return p, nil
	}
	p.Groups = gangs
	return p, nil
}

func hasKey(m map[string]string, k string) bool {
	_, ok := m[k]
	return ok
}

// everyOwn: every replicated job of ours sets its own min-count.
func everyOwn(rjs []replicatedJob, in Input) bool {
	for i := range rjs {
		if ours(&rjs[i].Template.Spec.Template, in) && !hasKey(rjs[i].Template.Annotations, AnnotationMinCount) {
			return false
		}
	}
	return true
}

// job is what the mapping reads of a batch/v1 Job.
type job struct {
	metav1.ObjectMeta `json:"metadata"`
	Spec              jobSpec `json:"spec"`
}

// planJob: an Indexed Job is one gang of the pods it runs at once
// (job.<job>) when its pods will name that group: the group the admission
// policy gives a pod of its template (with the labels the Job controller
// adds) is job.<job>. A JobSet's Job is not (its pods name the JobSet's
// group), unless its pod template lacks the JobSet labels (a JobSet
// version that renamed them): then the Job is its own gang and a Warning
// says so. Not a Job with spec.scheduling or a pod template that names a
// PodGroup (the Job controller groups those, gate WorkloadWithJob).
func planJob(in Input) (*Plan, error) {
	var j job
	if err := decode(in, &j); err != nil {
		return nil, err
	}
	if j.Spec.CompletionMode == nil || *j.Spec.CompletionMode != "Indexed" || j.Spec.Scheduling != nil || !ours(&j.Spec.Template, in) {
		return nil, nil
	}
	size := podsPerJob(j.Spec.Parallelism, j.Spec.Completions)
	labels := maps.Clone(j.Spec.Template.Labels)
	if labels == nil {
		labels = map[string]string{}
	}
	labels[LabelJobName], labels[LabelJobCompletionIndex] = j.Name, "0"
	name, rule, named := GroupOfPod(in.Mode, labels, j.Spec.Template.Annotations)
	if size <= 0 || rule.Kind != KindJob {
		return nil, nil // another rule names its pods' group (a JobSet's, a gang API's), or none applies
	}
	p := newPlan(in, &j.ObjectMeta, name)
	p.Labels = map[string]string{LabelJobName: j.Name}
	role := "Indexed Job " + j.Name
	if !named {
		p.Problems = append(p.Problems, badName(role, name))
		return p, nil
	}
	if c := metav1.GetControllerOf(&j); c != nil && c.Kind == "JobSet" {
		p.Warnings = append(p.Warnings, fmt.Sprintf(
			"Job %s of JobSet %s: its pod template lacks the JobSet labels gpufabric reads (%s, %s): a JobSet version that renamed them? Its pods are grouped per Job (PodGroup %s), not per replicated job",
			j.Name, c.Name, LabelJobSetName, LabelReplicatedJobName, name))
	}
	o, problems := readOptions(role, j.Annotations)
	g, more := gang(name, "job", role, size, o, []*corev1.PodTemplateSpec{&j.Spec.Template})
	p.Problems = append(problems, more...)
	p.Groups = []Group{g}
	return p, nil
}
