package grouper

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/gpufabric/gpufabric/pkg/workloads/grouping"
)

// Event reasons the grouper records on workloads.
const (
	// EventGangCreated (Normal): a group was created for the workload.
	EventGangCreated = "GangCreated"
	// EventGangOptionsInvalid (Warning): the workload's gang options
	// conflict or cannot be met; nothing was created or changed.
	EventGangOptionsInvalid = "GangOptionsInvalid"
	// EventGangNote (Normal): a choice the mapping made.
	EventGangNote = "GangNote"
	// EventGangNotUpdated (Warning): a group keeps a setting that cannot
	// change (immutable) or whose name another object holds.
	EventGangNotUpdated = "GangNotUpdated"
	// EventGangUnschedulable (Warning): the scheduler's reason why a
	// group of the workload waits, copied where its users look.
	EventGangUnschedulable = "GangUnschedulable"
	// EventGangLabelsMissing (Warning): the workload's pods lack the
	// labels its gang is named by; they are grouped otherwise (a JobSet's
	// Job on its own).
	EventGangLabelsMissing = "GangLabelsMissing"
	// EventGroupedByJobController (Normal): an Indexed Job the Job
	// controller groups (gate WorkloadWithJob); the grouper's own group
	// of it, if any, is removed.
	EventGroupedByJobController = "GroupedByJobController"
)

// reconcile makes the workload's groups match its plan. It returns a
// delay to look again after (a Job in its grace), or an error to retry
// with backoff.
func (g *Grouper) reconcile(ctx context.Context, k key) (time.Duration, error) {
	inf := g.w.kind(k.kind)
	if inf == nil {
		return 0, nil
	}
	o, exists, err := inf.GetIndexer().GetByKey(k.namespace + "/" + k.name)
	if err != nil || !exists {
		return 0, err // gone: garbage collection removes what it owned
	}
	obj, ok := o.(*unstructured.Unstructured)
	if !ok || obj.GetDeletionTimestamp() != nil {
		return 0, nil
	}
	logger := klog.FromContext(ctx).WithValues("workload", k.String())
	ctx = klog.NewContext(ctx, logger)
	if k.kind == grouping.KindJob {
		if wait, skip := g.jobControllerGroups(ctx, obj); skip || wait > 0 {
			return wait, nil
		}
	}
	if g.groupedByGangAPI(obj) {
		return 0, g.prune(ctx, obj.GetUID(), nil)
	}
	in := grouping.Input{Kind: k.kind, Object: obj, Mode: g.mode(), ParentAnnotations: g.parentAnnotations(obj)}
	_, in.NamespaceDefault, _ = g.w.namespaces.GetIndexer().GetByKey(obj.GetNamespace())
	plan, err := grouping.PlanFor(in)
	if err != nil {
		logger.V(2).Info("Workload does not decode", "err", err)
		return 0, nil // a new event brings it back
	}
	if plan == nil {
		return 0, g.prune(ctx, obj.GetUID(), nil)
	}
	if len(plan.Problems) > 0 {
		g.problems(obj, plan.Problems)
		return 0, nil
	}
	g.seen.forget("problems/" + string(obj.GetUID()))
	for _, n := range plan.Notes {
		g.once(obj, corev1.EventTypeNormal, EventGangNote, "note/"+string(obj.GetUID()), n)
	}
	for _, w := range plan.Warnings {
		g.once(obj, corev1.EventTypeWarning, EventGangLabelsMissing, "warning/"+string(obj.GetUID()), w)
	}
	if err := g.apply(ctx, obj, plan); err != nil {
		return 0, err
	}
	g.mirror(obj, plan)
	return 0, nil
}

// mode is the configured mode, flat while CompositePodGroups are not
// served.
func (g *Grouper) mode() grouping.Mode {
	if g.cfg.Mode == grouping.ModeComposite && g.w.compositeInformer() != nil {
		return grouping.ModeComposite
	}
	return grouping.ModeFlat
}

// parentAnnotations are those of the workload's controller when it is a
// parent kind of it (a TrainJob, a RayJob) that is watched.
func (g *Grouper) parentAnnotations(obj *unstructured.Unstructured) map[string]string {
	c := metav1.GetControllerOf(obj)
	if c == nil {
		return nil
	}
	gv, err := schema.ParseGroupVersion(c.APIVersion)
	if err != nil {
		return nil
	}
	for _, p := range []schema.GroupVersionResource{grouping.GVRTrainJob, grouping.GVRRayJob} {
		if p.Group != gv.Group || !parentKind(p, c.Kind) {
			continue
		}
		inf := g.w.parent(p)
		if inf == nil {
			return nil
		}
		o, ok, _ := inf.GetIndexer().GetByKey(obj.GetNamespace() + "/" + c.Name)
		if m, err := metaOf(o); ok && err == nil && m.GetUID() == c.UID {
			return m.GetAnnotations()
		}
	}
	return nil
}

func parentKind(gvr schema.GroupVersionResource, kind string) bool {
	switch gvr {
	case grouping.GVRTrainJob:
		return kind == "TrainJob"
	case grouping.GVRRayJob:
		return kind == "RayJob"
	}
	return false
}

// groupedByGangAPI: a scheduler-plugins or Volcano PodGroup belongs to
// the workload or its controller (KubeRay's gang options make one for a
// RayCluster or its RayJob): its pods name that gang (the pod rules put
// gang APIs first), so the workload gets no group of its own.
func (g *Grouper) groupedByGangAPI(obj *unstructured.Unstructured) bool {
	if obj.GetKind() == "PodGroup" {
		return false
	}
	uids := []string{string(obj.GetUID())}
	if c := metav1.GetControllerOf(obj); c != nil {
		uids = append(uids, string(c.UID))
	}
	for _, kind := range []grouping.Kind{grouping.KindSchedulerPluginsPodGroup, grouping.KindVolcanoPodGroup} {
		inf := g.w.kind(kind)
		if inf == nil {
			continue
		}
		for _, uid := range uids {
			if objs, _ := inf.GetIndexer().ByIndex(byOwner, uid); len(objs) > 0 {
				return true
			}
		}
	}
	return false
}

// jobControllerGroups: whether the Job controller groups this Job (it
// made a Workload for it: gate WorkloadWithJob), in which case the
// grouper removes its own group of it; or how long to wait for the Job
// controller to do so (a new Job).
func (g *Grouper) jobControllerGroups(ctx context.Context, job *unstructured.Unstructured) (time.Duration, bool) {
	objs, _ := g.w.workloads.GetIndexer().ByIndex(byController, job.GetNamespace()+"/Job/"+job.GetName())
	for _, o := range objs {
		w, ok := o.(*schedulingv1beta1.Workload)
		if !ok || w.Labels[grouping.LabelManagedBy] == grouping.ManagedBy || !metav1.IsControlledBy(w, job) {
			continue
		}
		if err := g.prune(ctx, job.GetUID(), nil); err != nil {
			klog.FromContext(ctx).V(2).Info("Removing the grouper's group of a Job the Job controller groups", "err", err)
		}
		g.once(job, corev1.EventTypeNormal, EventGroupedByJobController, "jobctl/"+string(job.GetUID()),
			fmt.Sprintf("the Job controller made Workload %s for this Job (WorkloadWithJob): its pods name that gang, gpufabric-grouper makes none", w.Name))
		return 0, true
	}
	age := time.Since(job.GetCreationTimestamp().Time)
	if age < g.cfg.JobControllerGrace {
		return g.cfg.JobControllerGrace - age, false
	}
	return 0, false
}

// problems records one Warning per problem, once per distinct set.
func (g *Grouper) problems(obj *unstructured.Unstructured, problems []grouping.Problem) {
	var all string
	for _, p := range problems {
		all += p.Message + "\n"
	}
	if !g.seen.changed("problems/"+string(obj.GetUID()), all) {
		return
	}
	for i, p := range problems {
		if i == maxEventsPerReconcile {
			break
		}
		g.report.Event(obj, corev1.EventTypeWarning, EventGangOptionsInvalid, "Grouping",
			p.Message+"; nothing is created or changed until this is fixed (docs/design/workload-grouping.md)")
	}
}

// maxEventsPerReconcile bounds the events of one reconcile.
const maxEventsPerReconcile = 8

// once records an event the first time its message is seen under key.
func (g *Grouper) once(obj *unstructured.Unstructured, eventType, reason, key, msg string) {
	if g.seen.changed(key, msg) {
		g.report.Event(obj, eventType, reason, "Grouping", msg)
	}
}

// ownedBy reports whether m's controller is the object with uid.
func ownedBy(m metav1.Object, uid types.UID) bool {
	c := metav1.GetControllerOfNoCopy(m)
	return c != nil && c.UID == uid
}

func isNotFound(err error) bool { return apierrors.IsNotFound(err) }
