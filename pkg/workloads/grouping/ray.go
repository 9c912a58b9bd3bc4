package grouping

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// rayCluster is what the mapping reads of a ray.io/v1 RayCluster.
type rayCluster struct {
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		EnableInTreeAutoscaling *bool `json:"enableInTreeAutoscaling,omitempty"`
		HeadGroupSpec           struct {
			Template corev1.PodTemplateSpec `json:"template"`
		} `json:"headGroupSpec"`
		WorkerGroupSpecs []rayWorkerGroup `json:"workerGroupSpecs,omitempty"`
	} `json:"spec"`
}

type rayWorkerGroup struct {
	GroupName   string                 `json:"groupName"`
	Replicas    *int32                 `json:"replicas,omitempty"`
	MinReplicas *int32                 `json:"minReplicas,omitempty"`
	MaxReplicas *int32                 `json:"maxReplicas,omitempty"`
	NumOfHosts  int32                  `json:"numOfHosts,omitempty"`
	Suspend     *bool                  `json:"suspend,omitempty"`
	Template    corev1.PodTemplateSpec `json:"template"`
}

// desired is the pods a worker group runs (KubeRay's
// GetWorkerGroupDesiredReplicas: replicas within min..max, times hosts),
// and the least it runs: its minimum under autoscaling, else all.
func (w *rayWorkerGroup) desired(autoscaling bool) (size, least int32) {
	if w.Suspend != nil && *w.Suspend {
		return 0, 0
	}
	hosts := max(w.NumOfHosts, 1)
	lo, hi := int32Or(w.MinReplicas, 0), int32Or(w.MaxReplicas, 1<<31-1)
	n := int32Or(w.Replicas, lo)
	n = min(max(n, lo), hi)
	if autoscaling {
		return n * hosts, lo * hosts
	}
	return n * hosts, n * hosts
}

// planRay: a RayCluster is one gang, its head and all its workers
// (ray.<cluster>); minCount is the head plus each worker group's desired
// pods, or its minimum under autoscaling, as KubeRay's own gang
// integrations count it. Workers the autoscaler adds later join the gang
// in its domain. A RayJob's RayCluster is grouped the same way (the
// RayJob's annotations apply). In composite mode: a CompositePodGroup
// ray.<cluster> over ray.<cluster>.headgroup and one PodGroup per worker
// group.
func planRay(in Input) (*Plan, error) {
	var rc rayCluster
	if err := decode(in, &rc); err != nil {
		return nil, err
	}
	autoscaling := rc.Spec.EnableInTreeAutoscaling != nil && *rc.Spec.EnableInTreeAutoscaling
	head := &rc.Spec.HeadGroupSpec.Template
	templates := []*corev1.PodTemplateSpec{head}
	mixed := false
	for i := range rc.Spec.WorkerGroupSpecs {
		t := &rc.Spec.WorkerGroupSpecs[i].Template
		templates = append(templates, t)
		mixed = mixed || ours(t, in) != ours(head, in)
	}
	if !ours(head, in) && !mixed {
		return nil, nil
	}
	name, ok := GroupName(PrefixRay, rc.Name)
	p := newPlan(in, &rc.ObjectMeta, name)
	p.Labels = map[string]string{LabelRayCluster: rc.Name}
	if rj := rc.Labels[LabelRayOriginatedFrom]; rj != "" && rc.Labels[LabelRayOriginatedFromCRD] == "RayJob" {
		p.Labels[LabelRayOriginatedFrom] = rj
	}
	role := "RayCluster " + rc.Name
	switch {
	case !ok:
		p.Problems = append(p.Problems, badName(role, name))
		return p, nil
	case mixed:
		p.Problems = append(p.Problems, Problem{Message: role + ": its head and worker templates name different schedulers (or some opted out with " + AnnotationGang + "): the cluster is one gang, placed by one scheduler"})
		return p, nil
	}
	o, problems := readOptions(role, in.ParentAnnotations, rc.Annotations)
	p.Problems = append(p.Problems, problems...)
	if in.Mode == ModeComposite && len(rc.Spec.WorkerGroupSpecs) > 0 {
		p.Groups = []Group{rayComposite(p, &rc, o, autoscaling)}
		return p, nil
	}
	size, least := int32(1), int32(1)
	for i := range rc.Spec.WorkerGroupSpecs {
		s, l := rc.Spec.WorkerGroupSpecs[i].desired(autoscaling)
		size, least = size+s, least+l
	}
	if o.minCount == 0 {
		o.minCount = least
	}
	g, more := gang(name, "cluster", role, size, o, templates)
	p.Problems = append(p.Problems, more...)
	p.Groups = []Group{g}
	return p, nil
}

// rayComposite: the head and each worker group are PodGroups under one
// CompositePodGroup whose gang needs the head and every group with a
// minimum.
func rayComposite(p *Plan, rc *rayCluster, o options, autoscaling bool) Group {
	root := Group{Name: p.Workload, Template: "cluster", Role: "RayCluster " + rc.Name, TopologyKey: o.topologyKey, PriorityClassName: rc.Spec.HeadGroupSpec.Template.Spec.PriorityClassName}
	child := o
	child.topologyKey, child.minCount = "", 0
	headName, _ := GroupName(PrefixRay, rc.Name, RayHeadGroup)
	h, more := gang(headName, RayHeadGroup, "head of RayCluster "+rc.Name, 1, child, []*corev1.PodTemplateSpec{&rc.Spec.HeadGroupSpec.Template})
	p.Problems = append(p.Problems, more...)
	root.Children = append(root.Children, h)
	for i := range rc.Spec.WorkerGroupSpecs {
		w := &rc.Spec.WorkerGroupSpecs[i]
		role := fmt.Sprintf("worker group %s of RayCluster %s", w.GroupName, rc.Name)
		name, ok := GroupName(PrefixRay, rc.Name, w.GroupName)
		if !ok || w.GroupName == RayHeadGroup {
			p.Problems = append(p.Problems, badName(role, name))
			continue
		}
		size, least := w.desired(autoscaling)
		c := child
		c.minCount = max(least, 1)
		g, more := gang(name, templateName(w.GroupName), role, max(size, c.minCount), c, []*corev1.PodTemplateSpec{&w.Template})
		p.Problems = append(p.Problems, more...)
		root.Children = append(root.Children, g)
		if least > 0 {
			root.MinCount++
		}
	}
	root.MinCount++ // the head
	root.Size = int32(len(root.Children))
	return root
}
