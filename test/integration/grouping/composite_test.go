package grouping

import (
	"context"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/gpufabric/gpufabric/pkg/gang/scheduler"
	"github.com/gpufabric/gpufabric/pkg/workloads/grouping"
	"github.com/gpufabric/gpufabric/test/integration/framework"
	"github.com/gpufabric/gpufabric/test/integration/itest"
)

// TestGrouperCompositeObjects: with --composite-groups (and
// scheduling.k8s.io/v1alpha3 served, gate CompositePodGroup) a RayCluster
// becomes a CompositePodGroup ray.<cluster> over one PodGroup per role
// (head, each worker group), whose pods the composite policy names, and a
// Workload of composite templates: the apiserver accepts every object, and
// gpufabric-scheduler (--composite-pod-groups) places the tree, every role
// of it.
func TestGrouperCompositeObjects(t *testing.T) {
	e := newEnv(t, grouping.ModeComposite, framework.Options{CompositePodGroups: true, Kwok: true})
	ctx := t.Context()
	itest.KwokFabric(t, e.admin, []string{"a", "b"}, 2, 4)
	e.startScheduler(t, scheduler.Config{CompositePodGroups: true})
	itest.GangNamespace(t, e.admin, "ray", 1)
	rc := e.createRay(t, "ray", "rc", 2)
	itest.Poll(t, "composite and its PodGroups", 45*time.Second, func(ctx context.Context) error {
		c, err := e.admin.SchedulingV1alpha3().CompositePodGroups("ray").Get(ctx, "ray.rc", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if owner := metav1.GetControllerOf(c); owner == nil || owner.UID != rc.GetUID() {
			return fmt.Errorf("composite owner %v", owner)
		}
		if g := c.Spec.SchedulingPolicy.Gang; g == nil || g.MinGroupCount != 2 || c.Spec.WorkloadRef == nil {
			return fmt.Errorf("composite spec %+v", c.Spec)
		}
		for _, name := range []string{"ray.rc.headgroup", "ray.rc.gpu"} {
			pg, err := e.admin.SchedulingV1beta1().PodGroups("ray").Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if ptr.Deref(pg.Spec.ParentCompositePodGroupName, "") != "ray.rc" {
				return fmt.Errorf("%s: parent %v", name, pg.Spec.ParentCompositePodGroupName)
			}
		}
		w, err := e.admin.SchedulingV1beta1().Workloads("ray").Get(ctx, "ray.rc", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if len(w.Spec.CompositePodGroupTemplates) != 1 || len(w.Spec.CompositePodGroupTemplates[0].PodGroupTemplates) != 2 {
			return fmt.Errorf("workload templates %+v", w.Spec)
		}
		return nil
	})
	pods, err := e.admin.CoreV1().Pods("ray").List(ctx, metav1.ListOptions{})
	itest.Must(t, "list pods", err)
	for _, p := range pods.Items {
		want := "ray.rc.gpu"
		if p.Labels[grouping.LabelRayNodeType] == "head" {
			want = "ray.rc.headgroup"
		}
		if sg := p.Spec.SchedulingGroup; sg == nil || ptr.Deref(sg.PodGroupName, "") != want {
			t.Errorf("pod %s names %v; want %s", p.Name, sg, want)
		}
	}
	e.waitGang(t, "ray", "ray.rc.headgroup", 1)
	e.waitGang(t, "ray", "ray.rc.gpu", 2)
}
