package grouping

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"

	"github.com/gpufabric/gpufabric/pkg/gang/vocab"
	"github.com/gpufabric/gpufabric/pkg/topology"
	"github.com/gpufabric/gpufabric/pkg/workloads/grouping"
	"github.com/gpufabric/gpufabric/test/integration/itest"
)

// Hand-made workload objects (the controllers do not run here): the
// workload itself, and the children its controller would make — a
// JobSet's Jobs (kube-controller-manager's Job controller makes their
// pods), a LeaderWorkerSet's or RayCluster's pods — with the labels and
// owner references the controllers set (read from their sources).

func gvr(kind grouping.Kind) schema.GroupVersionResource {
	info, _ := grouping.InfoOf(kind)
	return info.GVR
}

// podSpec is a workload pod: gpufabric-scheduler, its own GPU claim, and
// the fabric claim when fabric.
func podSpec(fabric bool) corev1.PodSpec {
	s := itest.TemplatePod("", "", "").Spec
	s.SchedulingGroup = nil
	s.RestartPolicy = corev1.RestartPolicyNever
	if !fabric {
		s.ResourceClaims = s.ResourceClaims[1:]
		s.Containers[0].Resources.Claims = s.Containers[0].Resources.Claims[1:]
	}
	return s
}

func toMap(t *testing.T, v any) map[string]any {
	t.Helper()
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(v)
	itest.Must(t, "to unstructured", err)
	return m
}

// createJobSet creates a JobSet of one replicated job "workers" of
// replicas Jobs of parallelism pods, and, as the JobSet controller would,
// its Jobs.
func (e *env) createJobSet(t *testing.T, ns, name string, annotations map[string]string, replicas, parallelism int32, fabric bool) *unstructured.Unstructured {
	t.Helper()
	tmpl := corev1.PodTemplateSpec{Spec: podSpec(fabric)}
	js := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
		"metadata": map[string]any{"name": name, "namespace": ns},
		"spec": map[string]any{"replicatedJobs": []any{map[string]any{
			"name": "workers", "replicas": int64(replicas),
			"template": map[string]any{"spec": map[string]any{
				"parallelism": int64(parallelism), "completions": int64(parallelism), "completionMode": "Indexed",
				"template": toMap(t, &tmpl)}},
		}}},
	}}
	js.SetAnnotations(annotations)
	js, err := e.dyn.Resource(gvr(grouping.KindJobSet)).Namespace(ns).Create(t.Context(), js, metav1.CreateOptions{})
	itest.Must(t, "create JobSet", err)
	if !noJobs(annotations) {
		for i := range replicas {
			e.createJobSetJob(t, js, "workers", int(i), parallelism, tmpl, nil)
		}
	}
	return js
}

// createJobSetJob makes Job i of a replicated job as the JobSet
// controller does (labelAndAnnotateObject); extra labels replace the pod
// template's JobSet labels when given (a controller that renamed them).
func (e *env) createJobSetJob(t *testing.T, js *unstructured.Unstructured, rj string, i int, parallelism int32, tmpl corev1.PodTemplateSpec, renamed map[string]string) {
	t.Helper()
	labels := map[string]string{
		grouping.LabelJobSetName: js.GetName(), grouping.LabelReplicatedJobName: rj, "jobset.sigs.k8s.io/jobset-uid": string(js.GetUID()),
		"jobset.sigs.k8s.io/job-index": strconv.Itoa(i), grouping.LabelJobGlobalIndex: strconv.Itoa(i), "jobset.sigs.k8s.io/restart-attempt": "0",
	}
	if renamed != nil {
		labels = renamed
	}
	tmpl.Labels, tmpl.Annotations = labels, labels
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{
			Name: fmt.Sprintf("%s-%s-%d", js.GetName(), rj, i), Namespace: js.GetNamespace(), Labels: labels,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: js.GetAPIVersion(), Kind: js.GetKind(), Name: js.GetName(), UID: js.GetUID(), Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}},
		},
		Spec: batchv1.JobSpec{Parallelism: ptr.To(parallelism), Completions: ptr.To(parallelism), CompletionMode: ptr.To(batchv1.IndexedCompletion), Template: tmpl},
	}
	_, err := e.admin.BatchV1().Jobs(js.GetNamespace()).Create(t.Context(), job, metav1.CreateOptions{})
	itest.Must(t, "create JobSet's Job", err)
}

// createLWS creates a LeaderWorkerSet of replicas groups of size pods,
// and its pods as LWS labels them (owned by it directly here: the
// StatefulSets in between need LWS's pod webhook to get their labels).
func (e *env) createLWS(t *testing.T, ns, name string, replicas, size int) *unstructured.Unstructured {
	t.Helper()
	tmpl := corev1.PodTemplateSpec{Spec: podSpec(false)}
	lws := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
		"metadata": map[string]any{"name": name, "namespace": ns},
		"spec":     map[string]any{"replicas": int64(replicas), "leaderWorkerTemplate": map[string]any{"size": int64(size), "workerTemplate": toMap(t, &tmpl)}},
	}}
	lws, err := e.dyn.Resource(gvr(grouping.KindLeaderWorkerSet)).Namespace(ns).Create(t.Context(), lws, metav1.CreateOptions{})
	itest.Must(t, "create LeaderWorkerSet", err)
	for g := range replicas {
		for w := range size {
			pod := name + "-" + strconv.Itoa(g)
			if w > 0 {
				pod += "-" + strconv.Itoa(w)
			}
			e.createOwnedPod(t, lws, pod, map[string]string{grouping.LabelLWSName: name, grouping.LabelLWSGroupIndex: strconv.Itoa(g), grouping.LabelLWSWorkerIndex: strconv.Itoa(w)}, nil)
		}
	}
	return lws
}

// createRay creates a RayCluster with a head and workers worker pods in
// group "gpu", and its pods as KubeRay makes them (owned by it).
func (e *env) createRay(t *testing.T, ns, name string, workers int) *unstructured.Unstructured {
	t.Helper()
	tmpl := toMap(t, &corev1.PodTemplateSpec{Spec: podSpec(false)})
	rc := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "ray.io/v1", "kind": "RayCluster",
		"metadata": map[string]any{"name": name, "namespace": ns},
		"spec": map[string]any{
			"headGroupSpec":    map[string]any{"rayStartParams": map[string]any{}, "template": tmpl},
			"workerGroupSpecs": []any{map[string]any{"groupName": "gpu", "replicas": int64(workers), "minReplicas": int64(workers), "maxReplicas": int64(workers), "rayStartParams": map[string]any{}, "template": tmpl}},
		},
	}}
	rc, err := e.dyn.Resource(gvr(grouping.KindRayCluster)).Namespace(ns).Create(t.Context(), rc, metav1.CreateOptions{})
	itest.Must(t, "create RayCluster", err)
	e.createOwnedPod(t, rc, name+"-head", map[string]string{grouping.LabelRayCluster: name, grouping.LabelRayGroup: grouping.RayHeadGroup, grouping.LabelRayNodeType: "head"}, nil)
	for i := range workers {
		e.createOwnedPod(t, rc, fmt.Sprintf("%s-gpu-worker-%d", name, i), map[string]string{grouping.LabelRayCluster: name, grouping.LabelRayGroup: "gpu", grouping.LabelRayNodeType: "worker"}, nil)
	}
	return rc
}

// createOwnedPod creates a workload pod controlled by owner.
func (e *env) createOwnedPod(t *testing.T, owner *unstructured.Unstructured, name string, labels, annotations map[string]string) {
	t.Helper()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: owner.GetNamespace(), Labels: labels, Annotations: annotations,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: owner.GetAPIVersion(), Kind: owner.GetKind(), Name: owner.GetName(), UID: owner.GetUID(), Controller: ptr.To(true)}}},
		Spec: podSpec(false),
	}
	_, err := e.admin.CoreV1().Pods(owner.GetNamespace()).Create(t.Context(), p, metav1.CreateOptions{})
	itest.Must(t, "create pod "+name, err)
}

// waitGang waits until group is placed and every pod naming it is bound,
// all of them in one NVLink domain, and returns the pods.
func (e *env) waitGang(t *testing.T, ns, group string, pods int) []corev1.Pod {
	t.Helper()
	var members []corev1.Pod
	itest.Poll(t, "gang "+ns+"/"+group+" placed", 60*time.Second, func(ctx context.Context) error {
		pg, err := e.admin.SchedulingV1beta1().PodGroups(ns).Get(ctx, group, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if c := findCond(pg.Status.Conditions, vocab.ConditionInitiallyScheduled); c == nil || c.Status != metav1.ConditionTrue {
			return fmt.Errorf("PodGroup condition %+v", c)
		}
		list, err := e.admin.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		members = nil
		domains := map[string]bool{}
		for _, p := range list.Items {
			if sg := p.Spec.SchedulingGroup; sg != nil && ptr.Deref(sg.PodGroupName, "") == group {
				if p.Spec.NodeName == "" {
					return fmt.Errorf("pod %s not bound", p.Name)
				}
				members = append(members, p)
				domains[itest.DomainOf(p.Spec.NodeName)] = true
			}
		}
		if len(members) != pods || len(domains) != 1 {
			return fmt.Errorf("%d members bound in domains %v; want %d in one", len(members), domains, pods)
		}
		return nil
	})
	return members
}

func findCond(cs []metav1.Condition, t string) *metav1.Condition {
	for i := range cs {
		if cs[i].Type == t {
			return &cs[i]
		}
	}
	return nil
}

// waitEvent waits for an event about the object kind/name with reason
// whose note contains part, and returns the note.
func (e *env) waitEvent(t *testing.T, ns, kind, name, reason, part string) string {
	t.Helper()
	var note string
	itest.Poll(t, fmt.Sprintf("%s event on %s %s", reason, kind, name), 45*time.Second, func(ctx context.Context) error {
		list, err := e.admin.EventsV1().Events(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		var seen []string
		for _, ev := range list.Items {
			if ev.Regarding.Kind == kind && (name == "" || ev.Regarding.Name == name) && ev.Reason == reason {
				if strings.Contains(ev.Note, part) {
					note = ev.Note
					return nil
				}
				seen = append(seen, ev.Note)
			}
		}
		return fmt.Errorf("none with %q; seen %q", part, seen)
	})
	return note
}

// fabricAnnotations: every member in one NVLink domain, sharing the
// group's fabric-domain channel.
var fabricAnnotations = map[string]string{
	grouping.AnnotationTopologyKey: string(topology.Qualified(topology.AttrNVLinkDomain)),
	grouping.AnnotationGroupClaims: itest.FabricTemplate,
}

// createForeign creates a scheduler-plugins or Volcano PodGroup of
// minMember members, and members pods that name it as PyTorchJob or
// KubeRay do (the label, or Volcano's annotation).
func (e *env) createForeign(t *testing.T, ns string, kind grouping.Kind, name string, members int) *unstructured.Unstructured {
	t.Helper()
	info, _ := grouping.InfoOf(kind)
	pg := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": info.GVK.GroupVersion().String(), "kind": "PodGroup",
		"metadata": map[string]any{"name": name, "namespace": ns},
		"spec":     map[string]any{"minMember": int64(members)},
	}}
	pg, err := e.dyn.Resource(info.GVR).Namespace(ns).Create(t.Context(), pg, metav1.CreateOptions{})
	itest.Must(t, "create "+string(kind), err)
	for i := range members {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", name, i), Namespace: ns}, Spec: podSpec(false)}
		if kind == grouping.KindVolcanoPodGroup {
			p.Annotations = map[string]string{grouping.AnnotationVolcanoGroupName: name}
		} else {
			p.Labels = map[string]string{grouping.LabelSchedulerPluginsPodGroup: name}
		}
		_, err := e.admin.CoreV1().Pods(ns).Create(t.Context(), p, metav1.CreateOptions{})
		itest.Must(t, "create pod", err)
	}
	return pg
}

// annotationNoJobs on a test JobSet: create no Jobs for it (the test
// makes them).
const annotationNoJobs = "test.gpufabric.dev/no-jobs"

func noJobs(a map[string]string) bool { _, ok := a[annotationNoJobs]; return ok }

// createRayWithGangAPI creates a RayCluster whose gang is a
// scheduler-plugins PodGroup it owns, as KubeRay's gang options make it: a
// head and one worker, labelled with both.
func (e *env) createRayWithGangAPI(t *testing.T, ns, name string) {
	t.Helper()
	tmpl := toMap(t, &corev1.PodTemplateSpec{Spec: podSpec(false)})
	rc := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "ray.io/v1", "kind": "RayCluster",
		"metadata": map[string]any{"name": name, "namespace": ns},
		"spec":     map[string]any{"headGroupSpec": map[string]any{"rayStartParams": map[string]any{}, "template": tmpl}},
	}}
	rc, err := e.dyn.Resource(gvr(grouping.KindRayCluster)).Namespace(ns).Create(t.Context(), rc, metav1.CreateOptions{})
	itest.Must(t, "create RayCluster", err)
	info, _ := grouping.InfoOf(grouping.KindSchedulerPluginsPodGroup)
	pgName := "ray-" + name + "-pg"
	pg := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": info.GVK.GroupVersion().String(), "kind": "PodGroup",
		"metadata": map[string]any{"name": pgName, "namespace": ns},
		"spec":     map[string]any{"minMember": int64(2)},
	}}
	pg.SetOwnerReferences([]metav1.OwnerReference{{APIVersion: "ray.io/v1", Kind: "RayCluster", Name: name, UID: rc.GetUID(), Controller: ptr.To(true)}})
	_, err = e.dyn.Resource(info.GVR).Namespace(ns).Create(t.Context(), pg, metav1.CreateOptions{})
	itest.Must(t, "create scheduler-plugins PodGroup", err)
	for i, role := range []string{"head", "worker"} {
		e.createOwnedPod(t, rc, fmt.Sprintf("%s-%d", name, i), map[string]string{grouping.LabelRayCluster: name, grouping.LabelRayNodeType: role,
			grouping.LabelSchedulerPluginsPodGroup: pgName}, nil)
	}
}
