package scheduler

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"

	"github.com/gpufabric/gpufabric/pkg/gang/domains"
	"github.com/gpufabric/gpufabric/pkg/topology"
	"github.com/gpufabric/gpufabric/test/integration/framework"
	"github.com/gpufabric/gpufabric/test/integration/itest"
)

// poolState is what the test reads back from the apiserver for one pool.
type poolState struct {
	Nodes    []string
	Channels int
	GPUCount int64
}

func clusterPools(ctx context.Context, c kubernetes.Interface) (map[string]poolState, error) {
	list, err := c.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	out := map[string]poolState{}
	for _, s := range list.Items {
		if s.Spec.Driver != topology.DriverName || s.Spec.NodeSelector == nil {
			continue
		}
		st := poolState{Nodes: s.Spec.NodeSelector.NodeSelectorTerms[0].MatchExpressions[0].Values, Channels: len(s.Spec.Devices)}
		if len(s.Spec.Devices) > 0 {
			st.GPUCount = *s.Spec.Devices[0].Attributes[topology.AttrGPUCount].IntValue
		}
		out[s.Spec.Pool.Name] = st
	}
	return out, nil
}

// TestFabricDomainPools runs the publisher against the real apiserver with
// the scheduler's shipped RBAC rules.
func TestFabricDomainPools(t *testing.T) {
	cp := framework.StartT(t, framework.Options{})
	ctx := t.Context()
	admin := cp.AdminClient(t)
	rules, err := framework.LoadRules(framework.SchedulerRulesFile)
	itest.Must(t, "load rules", err)
	scheduler := cp.ClientWithRules(t, "domains-scheduler", rules)

	for i := range 3 {
		for _, dom := range []string{"a", "b"} {
			_, err := admin.ResourceV1().ResourceSlices().Create(ctx, itest.GPUSlice(fmt.Sprintf("%s-%d", dom, i), "dom-"+dom, 4), metav1.CreateOptions{})
			itest.Must(t, "create slice", err)
		}
	}
	// b-0's hostname label differs from its name; the pool must select the label.
	_, err = admin.CoreV1().Nodes().Create(ctx, itest.Node("b-0", map[string]string{"kubernetes.io/hostname": "host-b0"}), metav1.CreateOptions{})
	itest.Must(t, "create node", err)
	factory := informers.NewSharedInformerFactory(scheduler, 0)
	sliceInformer := factory.Resource().V1().ResourceSlices().Informer()
	nodeInformer := factory.Core().V1().Nodes().Informer()
	_, err = domains.Start(ctx, domains.Config{Client: scheduler, Slices: sliceInformer, Nodes: nodeInformer, Channels: 4})
	itest.Must(t, "start publisher", err)
	factory.Start(ctx.Done())
	t.Cleanup(factory.Shutdown)

	expect := func(step string, want map[string]poolState) {
		t.Helper()
		var got map[string]poolState
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 20*time.Second, true, func(ctx context.Context) (bool, error) {
			var err error
			got, err = clusterPools(ctx, admin)
			return err == nil && cmp.Equal(want, got), err
		})
		if err != nil {
			t.Fatalf("%s: pools did not converge (-want +got):\n%s", step, cmp.Diff(want, got))
		}
	}
	expect("initial", map[string]poolState{
		"fabric-domain.dom-a": {Nodes: []string{"a-0", "a-1", "a-2"}, Channels: 4, GPUCount: 12},
		"fabric-domain.dom-b": {Nodes: []string{"b-1", "b-2", "host-b0"}, Channels: 4, GPUCount: 12},
	})

	// A GPU fault (device taint) lowers the domain's healthy GPU count.
	s, err := admin.ResourceV1().ResourceSlices().Get(ctx, "a-1-"+topology.DriverName, metav1.GetOptions{})
	itest.Must(t, "get slice", err)
	s.Spec.Devices[2].Taints = []resourceapi.DeviceTaint{{Key: topology.TaintNVLinkDegraded, Value: "2-of-18-links-down", Effect: resourceapi.DeviceTaintEffectNoSchedule}}
	s.Spec.Pool.Generation++
	_, err = admin.ResourceV1().ResourceSlices().Update(ctx, s, metav1.UpdateOptions{})
	itest.Must(t, "taint gpu", err)
	// A node joins domain b; domain a's node a-2 leaves.
	_, err = admin.ResourceV1().ResourceSlices().Create(ctx, itest.GPUSlice("b-3", "dom-b", 4), metav1.CreateOptions{})
	itest.Must(t, "add node", err)
	itest.Must(t, "remove node", admin.ResourceV1().ResourceSlices().Delete(ctx, "a-2-"+topology.DriverName, metav1.DeleteOptions{}))
	expect("after fault, join and leave", map[string]poolState{
		"fabric-domain.dom-a": {Nodes: []string{"a-0", "a-1"}, Channels: 4, GPUCount: 7},
		"fabric-domain.dom-b": {Nodes: []string{"b-1", "b-2", "b-3", "host-b0"}, Channels: 4, GPUCount: 16},
	})

	// A domain that is gone loses its pool.
	for _, n := range []string{"b-0", "b-1", "b-2", "b-3"} {
		itest.Must(t, "remove node", admin.ResourceV1().ResourceSlices().Delete(ctx, n+"-"+topology.DriverName, metav1.DeleteOptions{}))
	}
	expect("after domain b is gone", map[string]poolState{
		"fabric-domain.dom-a": {Nodes: []string{"a-0", "a-1"}, Channels: 4, GPUCount: 7},
	})
}
