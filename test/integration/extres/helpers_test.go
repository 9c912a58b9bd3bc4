package extres

import (
	"context"
	"fmt"
	"slices"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	schedulingv1alpha3 "k8s.io/api/scheduling/v1alpha3"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/gpufabric/gpufabric/pkg/gang/extres"
	"github.com/gpufabric/gpufabric/pkg/topology"
)

const gpuResource = corev1.ResourceName("nvidia.com/gpu")

// podSpec is an unchanged pod asking n of resource in one container
// (limits only, as users write them), for gpufabric-scheduler.
func podSpec(res corev1.ResourceName, n int64) corev1.PodSpec {
	return corev1.PodSpec{
		SchedulerName: topology.SchedulerName,
		Tolerations:   []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
		Containers: []corev1.Container{{
			Name: "train", Image: "registry.example/train:1",
			Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")},
				Limits:   corev1.ResourceList{res: *resource.NewQuantity(n, resource.DecimalSI)},
			},
		}},
	}
}

func bare(ns, name string, spec corev1.PodSpec) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: spec}
}

func deployment(ns, name string, replicas int32, gpus int64) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: podSpec(gpuResource, gpus)},
		},
	}
}

// gangJob is an Indexed Job of n pods of gpus GPUs each, placed as one
// gang (spec.scheduling, WorkloadWithJob): no claim in its spec.
func gangJob(ns, name string, n int32, gpus int64) *batchv1.Job {
	spec := podSpec(gpuResource, gpus)
	spec.RestartPolicy = corev1.RestartPolicyNever
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: batchv1.JobSpec{
			Parallelism: ptr.To(n), Completions: ptr.To(n), CompletionMode: ptr.To(batchv1.IndexedCompletion),
			Scheduling: &batchv1.JobSchedulingConfiguration{
				SchedulingPolicy: &schedulingv1alpha3.WorkloadPodGroupSchedulingPolicy{
					Gang: &schedulingv1alpha3.WorkloadPodGroupGangSchedulingPolicy{MinCount: ptr.To(n)},
				},
			},
			Template: corev1.PodTemplateSpec{Spec: spec},
		},
	}
}

// checkSpecialClaim checks a bound pod's special claim: kube-scheduler's
// name, generateName, annotation and owner; one request of n devices of
// class; allocated on the pod's node, reserved for the pod, with the
// delete-protection finalizer; and the pod's extendedResourceClaimStatus
// naming it. It returns the claim.
func checkSpecialClaim(ctx context.Context, c kubernetes.Interface, p *corev1.Pod, res corev1.ResourceName, class string, n int64) (*resourceapi.ResourceClaim, error) {
	if p.Spec.NodeName == "" {
		return nil, fmt.Errorf("pod %s not bound", p.Name)
	}
	claim, err := c.ResourceV1().ResourceClaims(p.Namespace).Get(ctx, extres.ClaimName(p), metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("pod %s: its special claim: %w", p.Name, err)
	}
	var problems []string
	if claim.GenerateName != p.Name+"-extended-resources-" || claim.Annotations[resourceapi.ExtendedResourceClaimAnnotation] != "true" || !extres.IsFor(claim, p) {
		problems = append(problems, fmt.Sprintf("metadata %+v is not kube-scheduler's", claim.ObjectMeta))
	}
	reqs := claim.Spec.Devices.Requests
	if len(reqs) != 1 || reqs[0].Name != "container-0-request-1" || reqs[0].Exactly == nil || reqs[0].Exactly.DeviceClassName != class || reqs[0].Exactly.Count != n {
		problems = append(problems, fmt.Sprintf("requests %+v, want container-0-request-1: %d of %s", reqs, n, class))
	}
	if a := claim.Status.Allocation; a == nil || int64(len(a.Devices.Results)) != n {
		problems = append(problems, fmt.Sprintf("allocation %+v, want %d devices", claim.Status.Allocation, n))
	} else {
		for _, r := range a.Devices.Results {
			if r.Pool != p.Spec.NodeName || r.Driver != topology.DriverName {
				problems = append(problems, fmt.Sprintf("device %s/%s not of the pod's node %s", r.Pool, r.Device, p.Spec.NodeName))
			}
		}
	}
	if len(claim.Status.ReservedFor) != 1 || claim.Status.ReservedFor[0].UID != p.UID || !slices.Contains(claim.Finalizers, resourceapi.Finalizer) {
		problems = append(problems, fmt.Sprintf("reservedFor %+v, finalizers %v", claim.Status.ReservedFor, claim.Finalizers))
	}
	want := corev1.PodExtendedResourceClaimStatus{ResourceClaimName: claim.Name, RequestMappings: []corev1.ContainerExtendedResourceRequest{
		{ContainerName: "train", ResourceName: string(res), RequestName: "container-0-request-1"},
	}}
	if st := p.Status.ExtendedResourceClaimStatus; st == nil || fmt.Sprint(*st) != fmt.Sprint(want) {
		problems = append(problems, fmt.Sprintf("pod status extendedResourceClaimStatus %+v, want %+v", st, want))
	}
	if len(problems) > 0 {
		return nil, fmt.Errorf("pod %s, claim %s: %s", p.Name, claim.Name, strings.Join(problems, "; "))
	}
	return claim, nil
}

// warnings lists the notes of Warning events about a pod with reason.
func warnings(ctx context.Context, c kubernetes.Interface, ns, pod, reason string) ([]string, error) {
	list, err := c.EventsV1().Events(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range list.Items {
		if e.Regarding.Kind == "Pod" && e.Regarding.Name == pod && e.Reason == reason && e.Type == corev1.EventTypeWarning {
			out = append(out, e.Note)
		}
	}
	return out, nil
}

func anyContains(notes []string, want string) bool {
	return slices.ContainsFunc(notes, func(n string) bool { return strings.Contains(n, want) })
}

// podsWith lists the namespace's pods with label key=value.
func podsWith(ctx context.Context, c kubernetes.Interface, ns, key, value string) ([]corev1.Pod, error) {
	l, err := c.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: key + "=" + value})
	if err != nil {
		return nil, err
	}
	return l.Items, nil
}
