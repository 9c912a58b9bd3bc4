package grouping

import (
	"fmt"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// leaderWorkerSet is what the mapping reads of a
// leaderworkerset.x-k8s.io/v1 LeaderWorkerSet.
type leaderWorkerSet struct {
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		Replicas             *int32 `json:"replicas,omitempty"`
		StartupPolicy        string `json:"startupPolicy,omitempty"`
		LeaderWorkerTemplate struct {
			LeaderTemplate *corev1.PodTemplateSpec `json:"leaderTemplate,omitempty"`
			WorkerTemplate corev1.PodTemplateSpec  `json:"workerTemplate"`
			Size           *int32                  `json:"size,omitempty"`
		} `json:"leaderWorkerTemplate"`
	} `json:"spec"`
}

// startupLeaderReady: LWS creates a group's workers only once its leader
// is ready.
const startupLeaderReady = "LeaderReady"

// planLWS: one gang per group (leader and workers, spec.leaderWorkerTemplate.size
// pods, lws.<name>.<group index>), as LWS users expect: a group is one
// model replica, groups are independent. With startupPolicy LeaderReady
// the workers do not exist before the leader runs, so the gang is the
// leader (minCount 1) and its workers join it in its domain.
func planLWS(in Input) (*Plan, error) {
	var l leaderWorkerSet
	if err := decode(in, &l); err != nil {
		return nil, err
	}
	tmpl := l.Spec.LeaderWorkerTemplate
	leader := &tmpl.WorkerTemplate
	if tmpl.LeaderTemplate != nil {
		leader = tmpl.LeaderTemplate
	}
	leaderOurs, workersOurs := ours(leader, in), ours(&tmpl.WorkerTemplate, in)
	size, replicas := int32Or(tmpl.Size, 1), int32Or(l.Spec.Replicas, 1)
	if !leaderOurs && (!workersOurs || size == 1) || replicas <= 0 || size <= 0 {
		return nil, nil
	}
	p := newPlan(in, &l.ObjectMeta, PrefixLWS+"."+l.Name)
	p.Labels = map[string]string{LabelLWSName: l.Name}
	if size > 1 && leaderOurs != workersOurs {
		p.Problems = append(p.Problems, Problem{Message: fmt.Sprintf(
			"LeaderWorkerSet %s: its leader and worker templates name different schedulers (or one opted out with %s): a group's pods are one gang, placed by one scheduler",
			l.Name, AnnotationGang)})
		return p, nil
	}
	if replicas > MaxGroups {
		p.Problems = append(p.Problems, Problem{Message: fmt.Sprintf("LeaderWorkerSet %s: %d replicas, more than the %d groups a workload may have", l.Name, replicas, MaxGroups)})
		return p, nil
	}
	o, problems := readOptions("LeaderWorkerSet "+l.Name, l.Annotations)
	p.Problems = append(p.Problems, problems...)
	if l.Spec.StartupPolicy == startupLeaderReady {
		if o.minCount > 1 {
			p.Problems = append(p.Problems, Problem{Annotation: AnnotationMinCount, Message: fmt.Sprintf(
				"LeaderWorkerSet %s: annotation %s %d with startupPolicy LeaderReady would wait for ever: the workers are created only once the leader runs; use startupPolicy LeaderCreated for a whole-group gang",
				l.Name, AnnotationMinCount, o.minCount)})
		}
		o.minCount = 1
		p.Notes = append(p.Notes, fmt.Sprintf("LeaderWorkerSet %s has startupPolicy LeaderReady: each group's leader is placed first (minCount 1) and its workers join it in its domain", l.Name))
	}
	templates := []*corev1.PodTemplateSpec{leader}
	if size > 1 {
		templates = append(templates, &tmpl.WorkerTemplate)
	}
	for i := range replicas {
		role := fmt.Sprintf("group %d of LeaderWorkerSet %s", i, l.Name)
		name, ok := GroupName(PrefixLWS, l.Name, strconv.Itoa(int(i)))
		if !ok {
			p.Problems = append(p.Problems, badName(role, name))
			break
		}
		g, more := gang(name, "group", role, size, o, templates)
		p.Problems = append(p.Problems, more...)
		p.Groups = append(p.Groups, g)
		if len(more) > 0 {
			break // the same problem for every group
		}
	}
	return p, nil
}
