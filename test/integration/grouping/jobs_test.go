package grouping

import (
	"context"
	"fmt"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/gpufabric/gpufabric/pkg/gang/scheduler"
	"github.com/gpufabric/gpufabric/pkg/workloads/grouper"
	"github.com/gpufabric/gpufabric/pkg/workloads/grouping"
	"github.com/gpufabric/gpufabric/test/integration/framework"
	"github.com/gpufabric/gpufabric/test/integration/itest"
)

// indexedJob is an Indexed Job of n pods of gpufabric-scheduler, with no
// spec.scheduling: what a user submits unchanged.
func indexedJob(ns, name string, n int32) *batchv1.Job {
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: batchv1.JobSpec{Parallelism: ptr.To(n), Completions: ptr.To(n), CompletionMode: ptr.To(batchv1.IndexedCompletion),
			Template: corev1.PodTemplateSpec{Spec: podSpec(false)}},
	}
}

// TestGrouperIndexedJobs: an Indexed Job submitted unchanged is placed as
// a gang either way. Without WorkloadWithJob (the Job controller makes no
// Workload) the grouper makes job.<name> once the Job controller's grace
// passed; its pods wait for it, then are placed. With WorkloadWithJob on
// the Job controller makes the gang, the grouper makes none and says so.
func TestGrouperIndexedJobs(t *testing.T) {
	for _, tc := range []struct {
		name  string
		gates string
		group func(t *testing.T, e *env) string
	}{
		{"without WorkloadWithJob", "WorkloadWithJob=false", func(t *testing.T, e *env) string {
			e.waitEvent(t, "team", "Job", "train", grouper.EventGangCreated, "created PodGroup job.train for Indexed Job train: 3 pods, minCount 3")
			return "job.train"
		}},
		{"with WorkloadWithJob", "", func(t *testing.T, e *env) string {
			e.waitEvent(t, "team", "Job", "train", grouper.EventGroupedByJobController, "the Job controller made Workload")
			if _, err := e.admin.SchedulingV1beta1().PodGroups("team").Get(t.Context(), "job.train", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				t.Errorf("the grouper made job.train beside the Job controller's gang: %v", err)
			}
			var name string
			itest.Poll(t, "the Job controller's PodGroup", 30*time.Second, func(ctx context.Context) error {
				list, err := e.admin.SchedulingV1beta1().PodGroups("team").List(ctx, metav1.ListOptions{})
				if err != nil || len(list.Items) != 1 {
					return fmt.Errorf("PodGroups %v, %v", list, err)
				}
				name = list.Items[0].Name
				return nil
			})
			return name
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, grouping.ModeFlat, framework.Options{Kwok: true, ExtraFeatureGates: tc.gates})
			itest.KwokFabric(t, e.admin, []string{"a", "b"}, 2, 8)
			e.startScheduler(t, scheduler.Config{DomainChannels: 4})
			itest.GangNamespace(t, e.admin, "team", 4)
			_, err := e.admin.BatchV1().Jobs("team").Create(t.Context(), indexedJob("team", "train", 3), metav1.CreateOptions{})
			itest.Must(t, "create Job", err)
			e.waitGang(t, "team", tc.group(t, e), 3)
		})
	}
}
