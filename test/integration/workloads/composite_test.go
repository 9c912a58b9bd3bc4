package workloads

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	"github.com/gpufabric/gpufabric/pkg/gang/vocab"
	"github.com/gpufabric/gpufabric/pkg/workloads/grouping"
	"github.com/gpufabric/gpufabric/test/integration/framework"
	"github.com/gpufabric/gpufabric/test/integration/framework/controllers"
	"github.com/gpufabric/gpufabric/test/integration/itest"
)

// treeCase is a smoke case in composite mode: its workload's
// CompositePodGroup and the PodGroup of each role under it.
type treeCase struct {
	smoke  smokeCase
	root   string
	leaves map[string]int // PodGroup → its pods
}

// TestWorkloadControllersComposite: composite mode (gpufabric-grouper
// --composite-groups, the chart's composite pod policy, the
// CompositePodGroup gate) with the real JobSet and KubeRay controllers: a
// JobSet of two replicated jobs and a RayCluster (head and a worker
// group) each become a CompositePodGroup owned by the workload over one
// PodGroup per role, whose pods name their role's group, and
// gpufabric-scheduler places each tree as one decision: every pod bound,
// each role's PodGroup placed in one NVLink domain, the root's Scheduled
// event.
func TestWorkloadControllersComposite(t *testing.T) {
	cp := framework.StartT(t, framework.Options{ControllerManager: true, Kwok: true, CompositePodGroups: true})
	admin := cp.AdminClient(t)
	_, ctx := ktesting.NewTestContext(t)
	started := make(chan error, 1)
	go func() { started <- controllers.Start(ctx, cp, controllers.JobSet, controllers.KubeRay) }()
	itest.KwokFabric(t, admin, []string{"a", "b"}, 4, 4)
	itest.Must(t, "start workload controllers", <-started)
	dyn, err := dynamic.NewForConfig(cp.AdminConfig())
	itest.Must(t, "dynamic client", err)
	itest.ApplyPodGroupPolicy(t, admin, grouping.ModeComposite)
	itest.StartGrouper(t, cp, grouping.ModeComposite)
	startScheduler(t, cp, true)
	for _, tc := range []treeCase{
		{smoke: jobSetCase(), root: "jobset.train", leaves: map[string]int{"jobset.train.driver": 1, "jobset.train.workers": 4}},
		{smoke: kubeRayCase(), root: "ray.ray", leaves: map[string]int{"ray.ray.headgroup": 1, "ray.ray.gpu": 2}},
	} {
		t.Run(tc.smoke.name, func(t *testing.T) {
			t.Parallel()
			runTree(t, admin, dyn, tc)
		})
	}
}

// runTree creates the case's workload and checks its tree.
func runTree(t *testing.T, admin kubernetes.Interface, dyn dynamic.Interface, tc treeCase) {
	ns := tc.smoke.name + "-tree"
	itest.GangNamespace(t, admin, ns, 1)
	tc.smoke.create(t, dyn, ns)
	pods := waitPlaced(t, admin, ns, tc.smoke.pods, slices.Collect(maps.Keys(tc.leaves)))
	c, err := admin.SchedulingV1alpha3().CompositePodGroups(ns).Get(t.Context(), tc.root, metav1.GetOptions{})
	itest.Must(t, "get the CompositePodGroup", err)
	if owner := metav1.GetControllerOf(c); owner == nil || owner.Kind != tc.smoke.owner {
		t.Errorf("%s: controller %v, want the %s", tc.root, owner, tc.smoke.owner)
	}
	if g := c.Spec.SchedulingPolicy.Gang; g == nil || g.MinGroupCount != int32(len(tc.leaves)) {
		t.Errorf("%s: gang policy %+v, want minGroupCount %d", tc.root, g, len(tc.leaves))
	}
	domains := map[string]map[string]bool{}
	for _, p := range pods {
		want, _, ok := grouping.GroupOfPod(grouping.ModeComposite, p.Labels, p.Annotations)
		got := ""
		if sg := p.Spec.SchedulingGroup; sg != nil {
			got = ptr.Deref(sg.PodGroupName, "")
		}
		if !ok || got != want || tc.leaves[got] == 0 {
			t.Errorf("pod %s names group %q; want its role's %q", p.Name, got, want)
			continue
		}
		if domains[got] == nil {
			domains[got] = map[string]bool{}
		}
		domains[got][itest.DomainOf(p.Spec.NodeName)] = true
	}
	for name, n := range tc.leaves {
		pg, err := admin.SchedulingV1beta1().PodGroups(ns).Get(t.Context(), name, metav1.GetOptions{})
		itest.Must(t, "get PodGroup "+name, err)
		cond := meta.FindStatusCondition(pg.Status.Conditions, vocab.ConditionInitiallyScheduled)
		switch {
		case ptr.Deref(pg.Spec.ParentCompositePodGroupName, "") != tc.root:
			t.Errorf("%s: parent %v, want %s", name, pg.Spec.ParentCompositePodGroupName, tc.root)
		case cond == nil || cond.Status != metav1.ConditionTrue:
			t.Errorf("%s not placed: %+v", name, cond)
		case len(domains[name]) != 1:
			t.Errorf("%s's %d pods in NVLink domains %v, want one", name, n, domains[name])
		}
	}
	itest.Poll(t, "the root's Scheduled event", 20*time.Second, func(ctx context.Context) error {
		evs, err := admin.EventsV1().Events(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		for _, e := range evs.Items {
			if e.Regarding.Kind == "CompositePodGroup" && e.Regarding.Name == tc.root && e.Reason == vocab.EventScheduled {
				return nil
			}
		}
		return fmt.Errorf("no %s event on CompositePodGroup %s", vocab.EventScheduled, tc.root)
	})
}
