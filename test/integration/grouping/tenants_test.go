package grouping

import (
	"context"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/ptr"

	"github.com/gpufabric/gpufabric/pkg/gang/scheduler"
	"github.com/gpufabric/gpufabric/pkg/gang/vocab"
	"github.com/gpufabric/gpufabric/pkg/workloads/grouping"
	"github.com/gpufabric/gpufabric/test/integration/framework"
	"github.com/gpufabric/gpufabric/test/integration/itest"
)

// TestGrouperTenants: a tenant groups only its own namespace's pods and
// cannot move pods into another workload's group. Tenant A (rights on
// pods, Jobs, JobSets and PodGroups of team-a only) submits a JobSet: its
// gang is made in team-a and placed. A's pods cannot be created in team-b;
// a pod of team-b that names the group finds none there. A pod A makes
// with the JobSet's labels, or naming the group outright with a Job of its
// own as controller, is not placed as a member: one NotGroupMember
// Warning each, and it stays unbound.
func TestGrouperTenants(t *testing.T) {
	e := newEnv(t, grouping.ModeFlat, framework.Options{Kwok: true})
	ctx := t.Context()
	itest.KwokFabric(t, e.admin, []string{"a", "b"}, 2, 8)
	e.startScheduler(t, scheduler.Config{DomainChannels: 4})
	itest.GangNamespace(t, e.admin, "team-a", 4)
	itest.GangNamespace(t, e.admin, "team-b", 4)
	a := tenant(t, e, "tenant-a", "team-a")
	cfg, err := e.cp.UserConfig("tenant-a")
	itest.Must(t, "tenant config", err)
	aDyn, err := dynamic.NewForConfig(cfg)
	itest.Must(t, "tenant dynamic client", err)

	// Tenant A's JobSet; its Jobs as the JobSet controller makes them.
	tmpl := corev1.PodTemplateSpec{Spec: podSpec(false)}
	js := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
		"metadata": map[string]any{"name": "train", "namespace": "team-a"},
		"spec": map[string]any{"replicatedJobs": []any{map[string]any{"name": "workers", "replicas": int64(1),
			"template": map[string]any{"spec": map[string]any{"parallelism": int64(2), "completions": int64(2), "completionMode": "Indexed", "template": toMap(t, &tmpl)}}}}},
	}}
	js, err = aDyn.Resource(gvr(grouping.KindJobSet)).Namespace("team-a").Create(ctx, js, metav1.CreateOptions{})
	itest.Must(t, "tenant creates JobSet", err)
	e.createJobSetJob(t, js, "workers", 0, 2, tmpl, nil)
	e.waitGang(t, "team-a", "jobset.train.workers", 2)

	// Another namespace: A may not create pods there; a pod of team-b
	// naming the group finds none in its own namespace.
	_, err = a.CoreV1().Pods("team-b").Create(ctx, forgedPod("team-b", "intruder", nil), metav1.CreateOptions{})
	if !apierrors.IsForbidden(err) {
		t.Errorf("tenant A created a pod in team-b: %v", err)
	}
	_, err = e.admin.CoreV1().Pods("team-b").Create(ctx, forgedPod("team-b", "b-pod", nil), metav1.CreateOptions{})
	itest.Must(t, "create team-b's pod", err)
	itest.Poll(t, "team-b's pod finds no group", 30*time.Second, func(ctx context.Context) error {
		return podsWaiting(ctx, e.admin, "team-b", "jobset.train.workers", 1, vocab.ReasonPodGroupNotFound)
	})

	// Forged members in team-a.
	_, err = a.CoreV1().Pods("team-a").Create(ctx, forgedPod("team-a", "labels-only", nil), metav1.CreateOptions{})
	itest.Must(t, "tenant creates a pod with the JobSet's labels", err)
	decoy, err := a.BatchV1().Jobs("team-a").Create(ctx, decoyJob(), metav1.CreateOptions{})
	itest.Must(t, "tenant creates its own Job", err)
	named := forgedPod("team-a", "named", &metav1.OwnerReference{APIVersion: "batch/v1", Kind: "Job", Name: decoy.Name, UID: decoy.UID, Controller: ptr.To(true)})
	named.Labels = nil
	named.Spec.SchedulingGroup = &corev1.PodSchedulingGroup{PodGroupName: ptr.To("jobset.train.workers")}
	_, err = a.CoreV1().Pods("team-a").Create(ctx, named, metav1.CreateOptions{})
	itest.Must(t, "tenant creates a pod naming the group", err)
	e.waitEvent(t, "team-a", "Pod", "labels-only", vocab.EventNotGroupMember, "which gpufabric-grouper made for JobSet train, but its controllers (none) do not lead there")
	e.waitEvent(t, "team-a", "Pod", "named", vocab.EventNotGroupMember, `its controllers (Job "decoy") do not lead there`)
	time.Sleep(3 * time.Second) // attempts after the events
	for _, name := range []string{"labels-only", "named"} {
		p, err := e.admin.CoreV1().Pods("team-a").Get(ctx, name, metav1.GetOptions{})
		itest.Must(t, "get forged pod", err)
		if p.Spec.NodeName != "" {
			t.Errorf("forged pod %s was bound to %s", name, p.Spec.NodeName)
		}
	}
	members := 0
	list, err := e.admin.CoreV1().Pods("team-a").List(ctx, metav1.ListOptions{})
	itest.Must(t, "list pods", err)
	for _, p := range list.Items {
		if p.Spec.NodeName != "" {
			members++
		}
	}
	if members != 2 {
		t.Errorf("%d pods of team-a bound; want the JobSet's 2", members)
	}
}

// forgedPod is a pod with the JobSet train's labels.
func forgedPod(ns, name string, owner *metav1.OwnerReference) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{
			grouping.LabelJobSetName: "train", grouping.LabelReplicatedJobName: "workers", grouping.LabelJobName: "train-workers-0", grouping.LabelJobCompletionIndex: "1"}},
		Spec: podSpec(false),
	}
	if owner != nil {
		p.OwnerReferences = []metav1.OwnerReference{*owner}
	}
	return p
}

// decoyJob is a suspended Job of the tenant's own (no pods).
func decoyJob() *batchv1.Job {
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: "decoy", Namespace: "team-a"},
		Spec:       batchv1.JobSpec{Suspend: ptr.To(true), Template: corev1.PodTemplateSpec{Spec: podSpec(false)}},
	}
}
