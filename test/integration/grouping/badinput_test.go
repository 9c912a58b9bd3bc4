package grouping

import (
	"context"
	"fmt"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/gpufabric/gpufabric/pkg/gang/scheduler"
	"github.com/gpufabric/gpufabric/pkg/gang/vocab"
	"github.com/gpufabric/gpufabric/pkg/workloads/grouper"
	"github.com/gpufabric/gpufabric/pkg/workloads/grouping"
	"github.com/gpufabric/gpufabric/test/integration/framework"
	"github.com/gpufabric/gpufabric/test/integration/itest"
)

// TestGrouperBadInput: bad input gets a clear event and loses nothing.
//   - A JobSet whose gang options conflict (min-count above its size):
//     one GangOptionsInvalid Warning naming the annotation, no group, its
//     pods wait; fixed, its gang is made and placed.
//   - A JobSet larger than any NVLink domain: its group is made, and the
//     scheduler's Unschedulable reason reaches the JobSet as a Warning.
//   - A JobSet whose controller renamed its labels (a new version): its
//     pods name no group, and each placed alone is told why.
//   - A LeaderWorkerSet scaled down loses the group of its last replica.
func TestGrouperBadInput(t *testing.T) {
	e := newEnv(t, grouping.ModeFlat, framework.Options{Kwok: true})
	ctx := t.Context()
	itest.KwokFabric(t, e.admin, []string{"a", "b", "c"}, 2, 8)
	e.startScheduler(t, scheduler.Config{DomainChannels: 4})
	itest.GangNamespace(t, e.admin, "team", 4)

	// Conflicting options, then fixed.
	js := e.createJobSet(t, "team", "conflict", map[string]string{grouping.AnnotationMinCount: "9"}, 1, 4, false)
	e.waitEvent(t, "team", "JobSet", "conflict", grouper.EventGangOptionsInvalid, "annotation gpufabric.dev/min-count: 9 is more than the 4 pods of the gang")
	itest.Poll(t, "conflict's pods wait for their group", 30*time.Second, func(ctx context.Context) error {
		return podsWaiting(ctx, e.admin, "team", "jobset.conflict.workers", 4, vocab.ReasonPodGroupNotFound)
	})
	if _, err := e.admin.SchedulingV1beta1().PodGroups("team").Get(ctx, "jobset.conflict.workers", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("a PodGroup was made for conflicting options: %v", err)
	}
	patch := []byte(`{"metadata":{"annotations":{"gpufabric.dev/min-count":"4"}}}`)
	_, err := e.dyn.Resource(gvr(grouping.KindJobSet)).Namespace("team").Patch(ctx, js.GetName(), types.MergePatchType, patch, metav1.PatchOptions{})
	itest.Must(t, "fix the JobSet", err)
	e.waitGang(t, "team", "jobset.conflict.workers", 4)

	// Larger than any domain (5 pods of 4 GPUs, domains of 16).
	e.createJobSet(t, "team", "huge", fabricAnnotations, 1, 5, true)
	e.waitEvent(t, "team", "JobSet", "huge", grouper.EventGangUnschedulable, "PodGroup jobset.huge.workers waits: needs 5 pods")

	// Renamed labels: the Jobs' pods carry the JobSet's name under a key
	// gpufabric does not read. The Indexed Job is grouped on its own (and
	// warned about); the pod of a Job that is not Indexed is placed alone
	// and told why.
	renamed := e.createJobSet(t, "team", "renamed", map[string]string{annotationNoJobs: ""}, 1, 2, false)
	tmpl := corev1.PodTemplateSpec{Spec: podSpec(false)}
	newLabels := map[string]string{"jobset.sigs.k8s.io/jobset-name-v2": "renamed"}
	e.createJobSetJob(t, renamed, "workers", 0, 2, tmpl, newLabels)
	e.waitEvent(t, "team", "Job", "renamed-workers-0", grouper.EventGangLabelsMissing, "lacks the JobSet labels gpufabric reads")
	e.waitGang(t, "team", "job.renamed-workers-0", 2)
	plain := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: "renamed-plain", Namespace: "team", OwnerReferences: []metav1.OwnerReference{{
			APIVersion: renamed.GetAPIVersion(), Kind: "JobSet", Name: "renamed", UID: renamed.GetUID(), Controller: ptr.To(true)}}},
		Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: newLabels}, Spec: podSpec(false)}},
	}
	_, err = e.admin.BatchV1().Jobs("team").Create(ctx, plain, metav1.CreateOptions{})
	itest.Must(t, "create the JobSet's plain Job", err)
	e.waitEvent(t, "team", "Pod", "", vocab.EventPlacedWithoutGang, "whose gang is PodGroup jobset.renamed.workers, but it names no PodGroup")
}

// podsWaiting: n pods of the namespace whose group is group are unbound
// with PodScheduled=False and reason.
func podsWaiting(ctx context.Context, c kubernetes.Interface, ns, group string, n int, reason string) error {
	list, err := c.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	count := 0
	for _, p := range list.Items {
		if p.Spec.SchedulingGroup == nil || ptr.Deref(p.Spec.SchedulingGroup.PodGroupName, "") != group {
			continue
		}
		if p.Spec.NodeName != "" {
			return fmt.Errorf("pod %s bound", p.Name)
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Reason == reason {
				count++
			}
		}
	}
	if count != n {
		return fmt.Errorf("%d pods waiting with %s, want %d", count, reason, n)
	}
	return nil
}

// tenant is a user with rights on the workloads, pods and claims of one
// namespace (and PodGroups, as tenants have), nothing else.
func tenant(t *testing.T, e *env, user, ns string) kubernetes.Interface {
	t.Helper()
	c := e.cp.ClientWithRules(t, user, nil)
	itest.Must(t, "grant tenant", framework.GrantNamespaceRules(t.Context(), e.admin, user, ns, []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"*"}},
		{APIGroups: []string{batchv1.GroupName}, Resources: []string{"jobs"}, Verbs: []string{"*"}},
		{APIGroups: []string{"jobset.x-k8s.io"}, Resources: []string{"jobsets"}, Verbs: []string{"*"}},
		{APIGroups: []string{schedulingv1beta1.GroupName}, Resources: []string{"podgroups"}, Verbs: []string{"*"}},
		{APIGroups: []string{"resource.k8s.io"}, Resources: []string{"resourceclaims", "resourceclaimtemplates"}, Verbs: []string{"*"}},
	}))
	return c
}
