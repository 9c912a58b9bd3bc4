package grouping

import (
	"maps"

	schedulingv1alpha3 "k8s.io/api/scheduling/v1alpha3"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"

	"github.com/gpufabric/gpufabric/pkg/gang/vocab"
)

// Labels and annotations on the objects the grouper creates.
const (
	// LabelManagedBy = ManagedBy marks them: the grouper lists and
	// changes only objects with it, and the chart's admission policy lets
	// only the grouper write them.
	LabelManagedBy = vocab.LabelManagedBy
	ManagedBy      = vocab.ManagedByGrouper
	// AnnotationMemberOwnerUID on a PodGroup: gpufabric-scheduler places
	// as members only pods whose controller chain leads to this UID
	// (pkg/gang/membership).
	AnnotationMemberOwnerUID = vocab.AnnotationMemberOwnerUID
	// AnnotationRole on a PodGroup says which pods it holds.
	AnnotationRole = "gpufabric.dev/role"
)

// Objects are a plan's API objects.
type Objects struct {
	// Workload is nil when the plan needs more templates than a Workload
	// holds (8): its PodGroups then name no Workload.
	Workload   *schedulingv1beta1.Workload
	PodGroups  []*schedulingv1beta1.PodGroup
	Composites []*schedulingv1alpha3.CompositePodGroup
}

// Objects materializes the plan: the Workload (one template per distinct
// Template), the PodGroups of its leaves and the CompositePodGroups of
// the groups with children, each owned by the workload.
func (p *Plan) Objects() Objects {
	var out Objects
	templates := p.templates()
	withWorkload := len(templates.flat)+len(templates.composite) <= schedulingv1beta1.WorkloadMaxPodGroupTemplates
	if withWorkload {
		gv := schema.FromAPIVersionAndKind(p.Owner.APIVersion, p.Owner.Kind)
		out.Workload = &schedulingv1beta1.Workload{
			ObjectMeta: p.meta(p.Workload, nil),
			Spec: schedulingv1beta1.WorkloadSpec{
				ControllerRef:              &schedulingv1beta1.TypedLocalObjectReference{APIGroup: gv.Group, Kind: p.Owner.Kind, Name: p.Owner.Name},
				PodGroupTemplates:          templates.flat,
				CompositePodGroupTemplates: templates.composite,
			},
		}
	}
	var walk func(gs []Group, parent string)
	walk = func(gs []Group, parent string) {
		for _, g := range gs {
			var ref *schedulingv1beta1.WorkloadReference
			if withWorkload {
				ref = &schedulingv1beta1.WorkloadReference{WorkloadName: p.Workload, TemplateName: g.Template}
			}
			if len(g.Children) > 0 {
				out.Composites = append(out.Composites, p.composite(g, parent, ref))
				walk(g.Children, g.Name)
				continue
			}
			out.PodGroups = append(out.PodGroups, p.podGroup(g, parent, ref))
		}
	}
	walk(p.Groups, "")
	return out
}

func (p *Plan) meta(name string, annotations map[string]string) metav1.ObjectMeta {
	labels := maps.Clone(p.Labels)
	if labels == nil {
		labels = map[string]string{}
	}
	labels[LabelManagedBy] = ManagedBy
	return metav1.ObjectMeta{
		Name: name, Namespace: p.Owner.Namespace,
		Labels:      labels,
		Annotations: annotations,
		OwnerReferences: []metav1.OwnerReference{{
			APIVersion: p.Owner.APIVersion, Kind: p.Owner.Kind, Name: p.Owner.Name, UID: p.Owner.UID,
			Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(false),
		}},
	}
}

func (p *Plan) podGroup(g Group, parent string, ref *schedulingv1beta1.WorkloadReference) *schedulingv1beta1.PodGroup {
	a := maps.Clone(g.Annotations)
	if a == nil {
		a = map[string]string{}
	}
	a[AnnotationRole] = g.Role
	if p.MemberOwnerUID != "" {
		a[AnnotationMemberOwnerUID] = string(p.MemberOwnerUID)
	}
	t := podGroupTemplate(g)
	pg := &schedulingv1beta1.PodGroup{
		ObjectMeta: p.meta(g.Name, a),
		Spec: schedulingv1beta1.PodGroupSpec{
			WorkloadRef:           ref,
			SchedulingPolicy:      t.SchedulingPolicy,
			SchedulingConstraints: t.SchedulingConstraints,
			ResourceClaims:        t.ResourceClaims,
			DisruptionMode:        t.DisruptionMode,
			PriorityClassName:     t.PriorityClassName,
		},
	}
	if parent != "" {
		pg.Spec.ParentCompositePodGroupName = ptr.To(parent)
	}
	return pg
}

func (p *Plan) composite(g Group, parent string, ref *schedulingv1beta1.WorkloadReference) *schedulingv1alpha3.CompositePodGroup {
	c := &schedulingv1alpha3.CompositePodGroup{
		ObjectMeta: p.meta(g.Name, map[string]string{AnnotationRole: g.Role}),
		Spec: schedulingv1alpha3.CompositePodGroupSpec{
			SchedulingPolicy:  schedulingv1alpha3.CompositePodGroupSchedulingPolicy{Gang: &schedulingv1alpha3.CompositeGangSchedulingPolicy{MinGroupCount: g.MinCount}},
			PriorityClassName: g.PriorityClassName,
		},
	}
	if ref != nil {
		c.Spec.WorkloadRef = &schedulingv1alpha3.WorkloadReference{WorkloadName: ref.WorkloadName, TemplateName: ref.TemplateName}
	}
	if g.TopologyKey != "" {
		c.Spec.SchedulingConstraints = &schedulingv1alpha3.CompositePodGroupSchedulingConstraints{Topology: []schedulingv1alpha3.TopologyConstraint{{Key: g.TopologyKey}}}
	}
	if parent != "" {
		c.Spec.ParentCompositePodGroupName = ptr.To(parent)
	}
	return c
}

// podGroupTemplate is the PodGroup settings of a leaf group.
func podGroupTemplate(g Group) schedulingv1beta1.PodGroupTemplate {
	t := schedulingv1beta1.PodGroupTemplate{
		Name:              g.Template,
		SchedulingPolicy:  schedulingv1beta1.PodGroupSchedulingPolicy{Gang: &schedulingv1beta1.GangSchedulingPolicy{MinCount: g.MinCount}},
		ResourceClaims:    g.Claims,
		PriorityClassName: g.PriorityClassName,
	}
	if g.TopologyKey != "" {
		t.SchedulingConstraints = &schedulingv1beta1.PodGroupSchedulingConstraints{Topology: []schedulingv1beta1.TopologyConstraint{{Key: g.TopologyKey}}}
	}
	if g.DisruptionAll {
		t.DisruptionMode = &schedulingv1beta1.DisruptionMode{All: &schedulingv1beta1.AllDisruptionMode{}}
	}
	return t
}

type workloadTemplates struct {
	flat      []schedulingv1beta1.PodGroupTemplate
	composite []schedulingv1beta1.CompositePodGroupTemplate
}

// templates are the Workload's templates: one per distinct Template of
// the roots (the first group of each name gives its settings), children
// nested in their composite's.
func (p *Plan) templates() workloadTemplates {
	var out workloadTemplates
	seen := map[string]bool{}
	for _, g := range p.Groups {
		if seen[g.Template] {
			continue
		}
		seen[g.Template] = true
		if len(g.Children) == 0 {
			out.flat = append(out.flat, podGroupTemplate(g))
			continue
		}
		out.composite = append(out.composite, compositeTemplate(g))
	}
	return out
}

func compositeTemplate(g Group) schedulingv1beta1.CompositePodGroupTemplate {
	t := schedulingv1beta1.CompositePodGroupTemplate{
		Name:              g.Template,
		SchedulingPolicy:  schedulingv1beta1.CompositePodGroupSchedulingPolicy{Gang: &schedulingv1beta1.CompositeGangSchedulingPolicy{MinGroupCount: g.MinCount}},
		PriorityClassName: g.PriorityClassName,
	}
	if g.TopologyKey != "" {
		t.SchedulingConstraints = &schedulingv1beta1.CompositePodGroupSchedulingConstraints{Topology: []schedulingv1beta1.TopologyConstraint{{Key: g.TopologyKey}}}
	}
	seen := map[string]bool{}
	for _, c := range g.Children {
		if seen[c.Template] {
			continue
		}
		seen[c.Template] = true
		if len(c.Children) == 0 {
			t.PodGroupTemplates = append(t.PodGroupTemplates, podGroupTemplate(c))
		} else {
			t.CompositePodGroupTemplates = append(t.CompositePodGroupTemplates, compositeTemplate(c))
		}
	}
	return t
}
