package grouper

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	schedulingv1alpha3 "k8s.io/api/scheduling/v1alpha3"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/gpufabric/gpufabric/pkg/gang/vocab"
	"github.com/gpufabric/gpufabric/pkg/workloads/grouping"
)

// apply creates what the plan has and the cluster lacks, updates what may
// change (minCount, the scheduler's annotations) and removes the groups of
// this workload the plan no longer has (a LeaderWorkerSet scaled down).
func (g *Grouper) apply(ctx context.Context, obj *unstructured.Unstructured, plan *grouping.Plan) error {
	objs := plan.Objects()
	var errs []error
	if objs.Workload != nil {
		errs = append(errs, g.applyWorkload(ctx, obj, objs.Workload))
	}
	for _, c := range objs.Composites {
		errs = append(errs, g.applyComposite(ctx, obj, c))
	}
	leaves := plan.Leaves()
	for i, pg := range objs.PodGroups {
		errs = append(errs, g.applyPodGroup(ctx, obj, pg, leaves[i]))
	}
	keep := map[string]bool{}
	for _, pg := range objs.PodGroups {
		keep[pg.Name] = true
	}
	for _, c := range objs.Composites {
		keep[c.Name] = true
	}
	errs = append(errs, g.prune(ctx, obj.GetUID(), keep))
	return errors.Join(errs...)
}

func (g *Grouper) applyPodGroup(ctx context.Context, obj *unstructured.Unstructured, want *schedulingv1beta1.PodGroup, leaf grouping.Group) error {
	client := g.cfg.Client.SchedulingV1beta1().PodGroups(want.Namespace)
	o, exists, err := g.w.podGroups.GetIndexer().GetByKey(want.Namespace + "/" + want.Name)
	if err != nil {
		return err
	}
	if !exists {
		_, err := client.Create(ctx, want, metav1.CreateOptions{FieldManager: Name})
		switch {
		case apierrors.IsAlreadyExists(err):
			// Not ours (the informer sees only ours), or not seen yet.
			g.once(obj, corev1.EventTypeWarning, EventGangNotUpdated, "taken/"+want.Namespace+"/"+want.Name,
				fmt.Sprintf("PodGroup %s exists and was not made by gpufabric-grouper for this workload: its pods name it, but its settings are whoever made it; rename the workload or delete that PodGroup", want.Name))
			return nil
		case err != nil:
			return fmt.Errorf("create PodGroup %s: %w", want.Name, err)
		}
		g.report.Event(obj, corev1.EventTypeNormal, EventGangCreated, "Grouping", describe(want, leaf))
		klog.FromContext(ctx).V(2).Info("Created PodGroup", "podGroup", klog.KObj(want))
		return nil
	}
	have, ok := o.(*schedulingv1beta1.PodGroup)
	if !ok {
		return nil
	}
	if !ownedBy(have, obj.GetUID()) {
		g.once(obj, corev1.EventTypeWarning, EventGangNotUpdated, "taken/"+have.Namespace+"/"+have.Name,
			fmt.Sprintf("PodGroup %s belongs to another workload of the same name (an earlier one not yet deleted?): it is made again for this one once it is gone", have.Name))
		return nil
	}
	if fields := immutableDiff(have, want); len(fields) > 0 {
		g.once(obj, corev1.EventTypeWarning, EventGangNotUpdated, "immutable/"+string(have.UID), fmt.Sprintf(
			"PodGroup %s keeps its %s: the field cannot change; the new value applies once the PodGroup is made again (delete it when none of its pods runs)", have.Name, strings.Join(fields, ", ")))
	}
	up := have.DeepCopy()
	up.Spec.SchedulingPolicy = want.Spec.SchedulingPolicy
	for _, k := range managedAnnotations() {
		if v, ok := want.Annotations[k]; ok {
			if up.Annotations == nil {
				up.Annotations = map[string]string{}
			}
			up.Annotations[k] = v
		} else {
			delete(up.Annotations, k)
		}
	}
	if apiequality.Semantic.DeepEqual(up, have) {
		return nil
	}
	if _, err := client.Update(ctx, up, metav1.UpdateOptions{FieldManager: Name}); err != nil {
		return fmt.Errorf("update PodGroup %s: %w", have.Name, err)
	}
	return nil
}

// managedAnnotations are the PodGroup annotations the grouper keeps equal
// to the workload's.
func managedAnnotations() []string {
	return []string{"gpufabric.dev/preferred-topology-key", "gpufabric.dev/rail-alignment", "gpufabric.dev/topology-spread",
		"gpufabric.dev/segment-size", "gpufabric.dev/segment-topology-key", vocab.AnnotationOnMemberLoss, vocab.AnnotationReplacementTimeout,
		grouping.AnnotationMemberOwnerUID, grouping.AnnotationRole}
}

// immutableDiff names the immutable fields of have that differ from want.
func immutableDiff(have, want *schedulingv1beta1.PodGroup) []string {
	var out []string
	h, w := have.Spec, want.Spec
	if !apiequality.Semantic.DeepEqual(h.SchedulingConstraints, w.SchedulingConstraints) {
		out = append(out, "topology key ("+grouping.AnnotationTopologyKey+")")
	}
	if !apiequality.Semantic.DeepEqual(h.ResourceClaims, w.ResourceClaims) {
		out = append(out, "claims ("+grouping.AnnotationGroupClaims+")")
	}
	if (h.DisruptionMode != nil && h.DisruptionMode.All != nil) != (w.DisruptionMode != nil && w.DisruptionMode.All != nil) {
		out = append(out, "disruption mode ("+grouping.AnnotationDisruptionMode+")")
	}
	if h.PriorityClassName != w.PriorityClassName {
		out = append(out, "priorityClassName")
	}
	return out
}

func describe(pg *schedulingv1beta1.PodGroup, leaf grouping.Group) string {
	s := fmt.Sprintf("created PodGroup %s for %s: %d pods, minCount %d", pg.Name, leaf.Role, leaf.Size, leaf.MinCount)
	if leaf.TopologyKey != "" {
		s += ", all in one " + leaf.TopologyKey
	}
	if len(leaf.Claims) > 0 {
		var names []string
		for _, c := range leaf.Claims {
			names = append(names, c.Name)
		}
		s += ", sharing claims " + strings.Join(names, ", ")
	}
	return s
}

func (g *Grouper) applyWorkload(ctx context.Context, obj *unstructured.Unstructured, want *schedulingv1beta1.Workload) error {
	client := g.cfg.Client.SchedulingV1beta1().Workloads(want.Namespace)
	o, exists, err := g.w.workloads.GetIndexer().GetByKey(want.Namespace + "/" + want.Name)
	if err != nil {
		return err
	}
	if !exists {
		if _, err := client.Create(ctx, want, metav1.CreateOptions{FieldManager: Name}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create Workload %s: %w", want.Name, err)
		}
		return nil
	}
	have, ok := o.(*schedulingv1beta1.Workload)
	if !ok || !ownedBy(have, obj.GetUID()) || len(have.Spec.PodGroupTemplates) != len(want.Spec.PodGroupTemplates) {
		return nil // another's, or templates cannot be added or removed: the PodGroups carry what matters
	}
	up := have.DeepCopy()
	for i := range up.Spec.PodGroupTemplates {
		if up.Spec.PodGroupTemplates[i].Name == want.Spec.PodGroupTemplates[i].Name {
			up.Spec.PodGroupTemplates[i].SchedulingPolicy = want.Spec.PodGroupTemplates[i].SchedulingPolicy
		}
	}
	if apiequality.Semantic.DeepEqual(up, have) {
		return nil
	}
	if _, err := client.Update(ctx, up, metav1.UpdateOptions{FieldManager: Name}); err != nil {
		return fmt.Errorf("update Workload %s: %w", have.Name, err)
	}
	return nil
}

func (g *Grouper) applyComposite(ctx context.Context, obj *unstructured.Unstructured, want *schedulingv1alpha3.CompositePodGroup) error {
	inf := g.w.compositeInformer()
	if inf == nil {
		return nil
	}
	if _, exists, err := inf.GetIndexer().GetByKey(want.Namespace + "/" + want.Name); err != nil || exists {
		return err
	}
	_, err := g.cfg.Client.SchedulingV1alpha3().CompositePodGroups(want.Namespace).Create(ctx, want, metav1.CreateOptions{FieldManager: Name})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create CompositePodGroup %s: %w", want.Name, err)
	}
	if err == nil {
		g.report.Event(obj, corev1.EventTypeNormal, EventGangCreated, "Grouping", fmt.Sprintf("created CompositePodGroup %s over %s", want.Name, "its roles' PodGroups"))
	}
	return nil
}

// prune deletes the grouper's PodGroups, CompositePodGroups and Workload
// controlled by uid whose names keep lacks (nil: all of them).
func (g *Grouper) prune(ctx context.Context, uid types.UID, keep map[string]bool) error {
	var errs []error
	pgs, _ := g.w.podGroups.GetIndexer().ByIndex(byOwner, string(uid))
	for _, o := range pgs {
		if pg, ok := o.(*schedulingv1beta1.PodGroup); ok && !keep[pg.Name] && pg.DeletionTimestamp == nil {
			errs = append(errs, ignoreNotFound(g.cfg.Client.SchedulingV1beta1().PodGroups(pg.Namespace).Delete(ctx, pg.Name, preconditions(pg.UID))))
		}
	}
	if inf := g.w.compositeInformer(); inf != nil {
		cs, _ := inf.GetIndexer().ByIndex(byOwner, string(uid))
		for _, o := range cs {
			if c, ok := o.(*schedulingv1alpha3.CompositePodGroup); ok && !keep[c.Name] && c.DeletionTimestamp == nil {
				errs = append(errs, ignoreNotFound(g.cfg.Client.SchedulingV1alpha3().CompositePodGroups(c.Namespace).Delete(ctx, c.Name, preconditions(c.UID))))
			}
		}
	}
	if keep == nil {
		ws, _ := g.w.workloads.GetIndexer().ByIndex(byOwner, string(uid))
		for _, o := range ws {
			if w, ok := o.(*schedulingv1beta1.Workload); ok && w.Labels[grouping.LabelManagedBy] == grouping.ManagedBy && w.DeletionTimestamp == nil {
				errs = append(errs, ignoreNotFound(g.cfg.Client.SchedulingV1beta1().Workloads(w.Namespace).Delete(ctx, w.Name, preconditions(w.UID))))
			}
		}
	}
	return errors.Join(errs...)
}

func preconditions(uid types.UID) metav1.DeleteOptions {
	return metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}}
}

func ignoreNotFound(err error) error {
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil
	}
	return err
}

// mirror copies the scheduler's reason why a group of the workload waits
// (PodGroupInitiallyScheduled=False, reason Unschedulable) to a Warning on
// the workload, once per message: users look at their JobSet, not at the
// PodGroup.
func (g *Grouper) mirror(obj *unstructured.Unstructured, plan *grouping.Plan) {
	names := map[string]bool{}
	for _, l := range plan.Leaves() {
		names[l.Name] = true
	}
	pgs, _ := g.w.podGroups.GetIndexer().ByIndex(byOwner, string(obj.GetUID()))
	slices.SortFunc(pgs, func(a, b any) int { return strings.Compare(a.(metav1.Object).GetName(), b.(metav1.Object).GetName()) })
	reported := 0
	for _, o := range pgs {
		pg, ok := o.(*schedulingv1beta1.PodGroup)
		if !ok || !names[pg.Name] || reported == maxEventsPerReconcile {
			continue
		}
		c := findCondition(pg.Status.Conditions, vocab.ConditionInitiallyScheduled)
		if c == nil || c.Status != metav1.ConditionFalse || c.Reason != vocab.ReasonUnschedulable {
			continue
		}
		if g.seen.changed("unschedulable/"+string(pg.UID), c.Message) {
			reported++
			g.report.Event(obj, corev1.EventTypeWarning, EventGangUnschedulable, "Scheduling", fmt.Sprintf("PodGroup %s waits: %s", pg.Name, c.Message))
		}
	}
}

func findCondition(cs []metav1.Condition, t string) *metav1.Condition {
	for i := range cs {
		if cs[i].Type == t {
			return &cs[i]
		}
	}
	return nil
}
