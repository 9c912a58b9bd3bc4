package grouping

import (
	"context"
	"fmt"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/gpufabric/gpufabric/pkg/gang/scheduler"
	"github.com/gpufabric/gpufabric/pkg/topology"
	"github.com/gpufabric/gpufabric/pkg/workloads/grouper"
	"github.com/gpufabric/gpufabric/pkg/workloads/grouping"
	"github.com/gpufabric/gpufabric/test/integration/framework"
	"github.com/gpufabric/gpufabric/test/integration/itest"
)

// TestGrouperPlacesGangs: workloads submitted with nothing but
// schedulerName gpufabric-scheduler (and gpufabric annotations) are placed
// as gangs: the grouper (the chart's rules) creates their Workload and
// PodGroups owned by them, the admission policy names each pod's group,
// gpufabric-scheduler places each gang in one NVLink domain. A JobSet (its
// Jobs' pods made by kube-controller-manager), a LeaderWorkerSet (one gang
// per group), a RayCluster (head and workers) and a scheduler-plugins
// PodGroup, and a RayCluster grouped through one it owns (KubeRay's gang
// options; no group of its own). A LeaderWorkerSet scaled down loses the group of its last
// replica; deleting the JobSet deletes its groups.
func TestGrouperPlacesGangs(t *testing.T) {
	e := newEnv(t, grouping.ModeFlat, framework.Options{Kwok: true})
	ctx := t.Context()
	itest.KwokFabric(t, e.admin, []string{"a", "b", "c"}, 2, 8)
	e.startScheduler(t, scheduler.Config{DomainChannels: 4})
	itest.GangNamespace(t, e.admin, "js", 4)
	itest.GangNamespace(t, e.admin, "lws", 2)
	itest.GangNamespace(t, e.admin, "ray", 1)

	js := e.createJobSet(t, "js", "train", fabricAnnotations, 2, 2, true)
	e.createLWS(t, "lws", "serve", 2, 2)
	e.createRay(t, "ray", "rc", 2)
	sp := e.createForeign(t, "ray", grouping.KindSchedulerPluginsPodGroup, "pt", 2)
	e.createRayWithGangAPI(t, "ray", "rc2")

	for _, g := range []struct {
		ns, name string
		pods     int
	}{{"js", "jobset.train.workers", 4}, {"lws", "lws.serve.0", 2}, {"lws", "lws.serve.1", 2}, {"ray", "ray.rc", 3}, {"ray", "sp.pt", 2}, {"ray", "sp.ray-rc2-pg", 2}} {
		e.waitGang(t, g.ns, g.name, g.pods)
	}
	pg, err := e.admin.SchedulingV1beta1().PodGroups("js").Get(ctx, "jobset.train.workers", metav1.GetOptions{})
	itest.Must(t, "get PodGroup", err)
	owner := metav1.GetControllerOf(pg)
	switch {
	case owner == nil || owner.UID != js.GetUID() || owner.Kind != "JobSet":
		t.Errorf("PodGroup owner %+v; want the JobSet", owner)
	case pg.Spec.SchedulingPolicy.Gang == nil || pg.Spec.SchedulingPolicy.Gang.MinCount != 4:
		t.Errorf("policy %+v; want gang of 4", pg.Spec.SchedulingPolicy)
	case pg.Spec.SchedulingConstraints == nil || pg.Spec.SchedulingConstraints.Topology[0].Key != string(topology.Qualified(topology.AttrNVLinkDomain)):
		t.Errorf("constraints %+v", pg.Spec.SchedulingConstraints)
	case len(pg.Spec.ResourceClaims) != 1 || ptr.Deref(pg.Spec.ResourceClaims[0].ResourceClaimTemplateName, "") != itest.FabricTemplate:
		t.Errorf("claims %+v", pg.Spec.ResourceClaims)
	case pg.Annotations[grouping.AnnotationMemberOwnerUID] != string(js.GetUID()):
		t.Errorf("annotations %v", pg.Annotations)
	}
	w, err := e.admin.SchedulingV1beta1().Workloads("js").Get(ctx, "jobset.train", metav1.GetOptions{})
	itest.Must(t, "get Workload", err)
	if w.Spec.ControllerRef == nil || w.Spec.ControllerRef.Name != "train" || len(w.Spec.PodGroupTemplates) != 1 {
		t.Errorf("Workload %+v", w.Spec)
	}
	e.waitEvent(t, "js", "JobSet", "train", grouper.EventGangCreated, "created PodGroup jobset.train.workers for replicated job workers of JobSet train: 4 pods, minCount 4")
	if owner := metav1.GetControllerOf(mustPG(t, e, "ray", "sp.pt")); owner == nil || owner.UID != sp.GetUID() {
		t.Errorf("sp.pt owner %+v; want the scheduler-plugins PodGroup", owner)
	}

	// A RayCluster grouped through a gang API's PodGroup (KubeRay's gang
	// options) gets no group of its own.
	if _, err := e.admin.SchedulingV1beta1().PodGroups("ray").Get(ctx, "ray.rc2", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("RayCluster rc2, grouped by its scheduler-plugins PodGroup, got a group of its own: %v", err)
	}

	// A LeaderWorkerSet scaled down loses its last group (LWS deletes the
	// group's pods; the grouper, the PodGroup).
	patch := []byte(`{"spec":{"replicas":1}}`)
	_, err = e.dyn.Resource(gvr(grouping.KindLeaderWorkerSet)).Namespace("lws").Patch(ctx, "serve", types.MergePatchType, patch, metav1.PatchOptions{})
	itest.Must(t, "scale LeaderWorkerSet down", err)
	for _, p := range []string{"serve-1", "serve-1-1"} {
		itest.Must(t, "delete pod", e.admin.CoreV1().Pods("lws").Delete(ctx, p, metav1.DeleteOptions{}))
	}
	itest.Poll(t, "lws.serve.1 gone, lws.serve.0 kept", 60*time.Second, func(ctx context.Context) error {
		if _, err := e.admin.SchedulingV1beta1().PodGroups("lws").Get(ctx, "lws.serve.1", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("lws.serve.1 still there: %v", err)
		}
		_, err := e.admin.SchedulingV1beta1().PodGroups("lws").Get(ctx, "lws.serve.0", metav1.GetOptions{})
		return err
	})

	// Deleting the JobSet deletes its Jobs, pods and groups.
	itest.Must(t, "delete JobSet", e.dyn.Resource(gvr(grouping.KindJobSet)).Namespace("js").Delete(ctx, "train", metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationBackground)}))
	itest.Poll(t, "JobSet's groups gone", 90*time.Second, func(ctx context.Context) error {
		_, err := e.admin.SchedulingV1beta1().PodGroups("js").Get(ctx, "jobset.train.workers", metav1.GetOptions{})
		if !apierrors.IsNotFound(err) {
			return fmt.Errorf("PodGroup still there: %v", err)
		}
		_, err = e.admin.SchedulingV1beta1().Workloads("js").Get(ctx, "jobset.train", metav1.GetOptions{})
		if !apierrors.IsNotFound(err) {
			return fmt.Errorf("Workload still there: %v", err)
		}
		return nil
	})
}

func mustPG(t *testing.T, e *env, ns, name string) metav1.Object {
	t.Helper()
	pg, err := e.admin.SchedulingV1beta1().PodGroups(ns).Get(t.Context(), name, metav1.GetOptions{})
	itest.Must(t, "get PodGroup "+name, err)
	return pg
}
