package grouping

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/gpufabric/gpufabric/pkg/topology"
)

// Input is a workload to plan gangs for.
type Input struct {
	Kind   Kind
	Object *unstructured.Unstructured
	// ParentAnnotations are the annotations of the workload's controller
	// when it is a parent kind (KindInfo.Parents: the TrainJob of a
	// JobSet, the RayJob of a RayCluster); the workload's own win.
	ParentAnnotations map[string]string
	// NamespaceDefault: the namespace is labelled for gpufabric (the
	// chart's admission policy sets schedulerName gpufabric-scheduler on
	// its pods that name the default scheduler).
	NamespaceDefault bool
	Mode             Mode
}

// PlanFor maps a workload to its gangs. A nil plan (and nil error) means
// nothing of it is gpufabric's: no pod template names gpufabric-scheduler,
// every one opted out (annotation gpufabric.dev/gang: "false"), or
// another controller groups it (a Job of a JobSet, a Job with
// spec.scheduling). A plan with Problems must not be created. The error
// is for objects that do not decode.
func PlanFor(in Input) (*Plan, error) {
	switch in.Kind {
	case KindJobSet:
		return planJobSet(in)
	case KindLeaderWorkerSet:
		return planLWS(in)
	case KindRayCluster:
		return planRay(in)
	case KindJob:
		return planJob(in)
	case KindSchedulerPluginsPodGroup, KindVolcanoPodGroup:
		return planForeign(in)
	}
	return nil, fmt.Errorf("kind %q is not supported", in.Kind)
}

// decode converts the workload into its minimal typed form (unknown
// fields are ignored: the controllers' newer fields do not matter).
func decode(in Input, into any) error {
	if in.Object == nil {
		return fmt.Errorf("no object")
	}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(in.Object.Object, into); err != nil {
		return fmt.Errorf("decode %s %s/%s: %w", in.Kind, in.Object.GetNamespace(), in.Object.GetName(), err)
	}
	return nil
}

// newPlan starts a plan owned by the workload.
func newPlan(in Input, meta *metav1.ObjectMeta, workload string) *Plan {
	return &Plan{
		Kind: in.Kind, Workload: workload, MemberOwnerUID: meta.UID,
		Owner: Owner{APIVersion: in.Object.GetAPIVersion(), Kind: in.Object.GetKind(), Namespace: meta.Namespace, Name: meta.Name, UID: meta.UID},
	}
}

// ours reports whether pods of this template are gpufabric's to group:
// they name gpufabric-scheduler (or the default scheduler in a namespace
// whose default is gpufabric), no PodGroup of their own, and did not opt
// out.
func ours(t *corev1.PodTemplateSpec, in Input) bool {
	switch {
	case t.Annotations[AnnotationGang] == "false", t.Spec.SchedulingGroup != nil:
		return false
	case t.Spec.SchedulerName == topology.SchedulerName:
		return true
	}
	return in.NamespaceDefault && (t.Spec.SchedulerName == "" || t.Spec.SchedulerName == corev1.DefaultSchedulerName)
}

// podsPerJob is how many pods of a Job run at once: its parallelism
// (default 1), at most its completions.
func podsPerJob(parallelism, completions *int32) int32 {
	n := int32(1)
	if parallelism != nil {
		n = *parallelism
	}
	if completions != nil && *completions < n {
		n = *completions
	}
	return n
}

func int32Or(p *int32, def int32) int32 {
	if p == nil {
		return def
	}
	return *p
}

// badName is the problem of a group whose name is not a DNS subdomain.
func badName(role, name string) Problem {
	return Problem{Message: fmt.Sprintf("%s: the group's name %s is not a valid PodGroup name (a DNS subdomain of at most 253 characters): its pods are placed without a gang; rename the workload", role, quote(name))}
}
