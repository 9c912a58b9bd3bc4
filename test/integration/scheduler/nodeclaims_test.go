package scheduler

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/gpufabric/gpufabric/pkg/gang/scheduler"
	"github.com/gpufabric/gpufabric/pkg/gang/vocab"
	"github.com/gpufabric/gpufabric/pkg/topology"
	"github.com/gpufabric/gpufabric/test/integration/framework"
	"github.com/gpufabric/gpufabric/test/integration/itest"
)

// TestNodeClaimsCrossChecked: node b-1, whose admin label
// (node-restriction.kubernetes.io/gpufabric.nvlink-domain, which a kubelet
// cannot set) says dom-b, publishes its GPUs in dom-a, as a compromised
// node could to attract dom-a's gangs. The scheduler refuses it: a gang
// that fits dom-a only with b-1's GPUs stays unplaced, a gang that fits
// the trusted dom-a nodes is placed there and nowhere else, dom-a's
// fabric-domain pool does not select b-1, and b-1 gets one Warning event
// naming both domains, however often gangs are tried.
func TestNodeClaimsCrossChecked(t *testing.T) {
	cp := framework.StartT(t, framework.Options{ControllerManager: true})
	admin := cp.AdminClient(t)
	ctx := t.Context()
	itest.FabricCluster(t, admin, []string{"a", "b"}, 2, 4)
	for node, domain := range map[string]string{"a-0": "dom-a", "a-1": "dom-a", "b-0": "dom-b", "b-1": "dom-b"} {
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]string{topology.LabelAdminNVLinkDomain: domain}}})
		_, err := admin.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, patch, metav1.PatchOptions{})
		itest.Must(t, "admin labels "+node, err)
	}
	// The lie, in b-1's own slice.
	slice, err := admin.ResourceV1().ResourceSlices().Get(ctx, "b-1-"+topology.DriverName, metav1.GetOptions{})
	itest.Must(t, "get b-1's slice", err)
	for i := range slice.Spec.Devices {
		slice.Spec.Devices[i].Attributes[topology.AttrNVLinkDomain] = itest.GPUSlice("b-1", "dom-a", 1).Spec.Devices[0].Attributes[topology.AttrNVLinkDomain]
	}
	_, err = admin.ResourceV1().ResourceSlices().Update(ctx, slice, metav1.UpdateOptions{})
	itest.Must(t, "b-1 claims dom-a", err)

	const ns = "team"
	itest.GangNamespace(t, admin, ns, 4)
	startScheduler(t, schedulerClient(t, cp, "gpufabric-scheduler"), scheduler.Config{DomainChannels: 4})
	itest.CreateGang(t, admin, ns, "needs-b-1", 3, 3) // 12 GPUs in one domain: only dom-a with b-1's
	itest.Poll(t, "needs-b-1 tried", 60*time.Second, func(ctx context.Context) error {
		pg, err := admin.SchedulingV1beta1().PodGroups(ns).Get(ctx, "needs-b-1", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if c := meta.FindStatusCondition(pg.Status.Conditions, vocab.ConditionInitiallyScheduled); c == nil {
			return fmt.Errorf("no %s condition yet", vocab.ConditionInitiallyScheduled)
		} else if c.Status != metav1.ConditionFalse {
			t.Errorf("needs-b-1: %s=%s (%s), want False: it fits only with b-1's GPUs", c.Type, c.Status, c.Message)
		}
		return nil
	})
	itest.CreateGang(t, admin, ns, "fits", 2, 2)
	itest.Poll(t, "the gang that fits without b-1 placed on dom-a's trusted nodes", 60*time.Second, func(ctx context.Context) error {
		var nodes []string
		for i := range 2 {
			p, err := admin.CoreV1().Pods(ns).Get(ctx, fmt.Sprintf("fits-%d", i), metav1.GetOptions{})
			if err != nil {
				return err
			}
			nodes = append(nodes, p.Spec.NodeName)
		}
		if slices.Sort(nodes); !slices.Equal(nodes, []string{"a-0", "a-1"}) {
			return fmt.Errorf("gang fits on %v, want a-0 and a-1", nodes)
		}
		return nil
	})
	// Several attempts of needs-b-1 later: unplaced, nothing on b-1.
	time.Sleep(5 * time.Second)
	pods, err := admin.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	itest.Must(t, "list pods", err)
	for _, p := range pods.Items {
		if p.Spec.NodeName == "b-1" || (strings.HasPrefix(p.Name, "needs-b-1-") && p.Spec.NodeName != "") {
			t.Errorf("pod %s bound to %s", p.Name, p.Spec.NodeName)
		}
	}
	for _, n := range []string{"a-0", "a-1", "b-0"} {
		if notes, err := nodeEvents(ctx, admin, n); err != nil || len(notes) != 0 {
			t.Errorf("events on trusted node %s: %q (%v)", n, notes, err)
		}
	}
	all, err := admin.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
	itest.Must(t, "list slices", err)
	for _, s := range all.Items {
		if s.Spec.NodeName == nil && s.Spec.Pool.Name == topology.FabricDomainPoolName("dom-a") {
			sel, _ := json.Marshal(s.Spec.NodeSelector)
			if strings.Contains(string(sel), `"b-1"`) {
				t.Errorf("dom-a's fabric-domain pool selects b-1: %s", sel)
			}
		}
	}
	itest.Poll(t, "one Warning event on b-1 naming both domains", 30*time.Second, func(ctx context.Context) error {
		notes, err := nodeEvents(ctx, admin, "b-1")
		if err != nil {
			return err
		}
		if len(notes) != 1 || !strings.Contains(notes[0], "publishes GPUs in NVLink domain dom-a, but its label "+topology.LabelAdminNVLinkDomain+` says "dom-b"`) {
			return fmt.Errorf("events on b-1: %q", notes)
		}
		return nil
	})
	time.Sleep(3 * time.Second)
	if notes, err := nodeEvents(ctx, admin, "b-1"); err != nil || len(notes) != 1 {
		t.Errorf("events on b-1 after more attempts: %q (%v), want still one", notes, err)
	}
}

// nodeEvents lists the notes of the scheduler's FabricDomainRefused events
// about a node.
func nodeEvents(ctx context.Context, c kubernetes.Interface, node string) ([]string, error) {
	list, err := c.EventsV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	var notes []string
	for _, e := range list.Items {
		if e.Regarding.Kind == "Node" && e.Regarding.Name == node && e.Reason == vocab.EventNodeFabricRefused && e.Type == corev1.EventTypeWarning {
			notes = append(notes, e.Note)
		}
	}
	slices.Sort(notes)
	return notes, nil
}
