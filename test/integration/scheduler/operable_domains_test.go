package scheduler

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"

	"github.com/gpufabric/gpufabric/pkg/gang/domains"
	"github.com/gpufabric/gpufabric/pkg/topology"
	"github.com/gpufabric/gpufabric/test/integration/framework"
	"github.com/gpufabric/gpufabric/test/integration/itest"
)

// TestFabricDomainPoolsOwned: with the DeviceClass fabric-domain.gpufabric.dev
// in the cluster, the publisher (as the scheduler's shipped RBAC) gives every
// pool slice an owner reference to it — the slices it creates and one an
// earlier version published without owner (adopted, not replaced) — so the
// garbage collector removes them with the class at uninstall.
func TestFabricDomainPoolsOwned(t *testing.T) {
	cp := framework.StartT(t, framework.Options{})
	ctx := t.Context()
	admin := cp.AdminClient(t)
	rules, err := framework.LoadRules(framework.SchedulerRulesFile)
	itest.Must(t, "load rules", err)
	scheduler := cp.ClientWithRules(t, "owned-pools-scheduler", rules)
	class, err := admin.ResourceV1().DeviceClasses().Create(ctx, itest.DeviceClass(topology.FabricDomainDeviceClass, "true"), metav1.CreateOptions{})
	itest.Must(t, "create the class", err)
	for _, dom := range []string{"a", "b"} {
		for i := range 2 {
			_, err := admin.ResourceV1().ResourceSlices().Create(ctx, itest.GPUSlice(fmt.Sprintf("%s-%d", dom, i), "dom-"+dom, 4), metav1.CreateOptions{})
			itest.Must(t, "create node slice", err)
		}
	}
	// Pool a as a publisher without owners left it (its slice name is the
	// resourceslice controller's: index, driver, suffix).
	old := itest.FabricDomainSlice(topology.FabricDomainPoolName("dom-a"), "a-0", "a-1")
	old.Name = "00000-" + topology.DriverName + "-old"
	_, err = admin.ResourceV1().ResourceSlices().Create(ctx, old, metav1.CreateOptions{})
	itest.Must(t, "create an owner-less pool", err)

	factory := informers.NewSharedInformerFactory(scheduler, 0)
	_, err = domains.Start(ctx, domains.Config{Client: scheduler, Slices: factory.Resource().V1().ResourceSlices().Informer(),
		Nodes: factory.Core().V1().Nodes().Informer(), Channels: 2})
	itest.Must(t, "start publisher", err)
	factory.Start(ctx.Done())
	t.Cleanup(factory.Shutdown)

	itest.Poll(t, "every pool owned by the class, the old one adopted", 30*time.Second, func(ctx context.Context) error {
		list, err := admin.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		pools := map[string]bool{}
		adopted := false
		for _, s := range list.Items {
			if s.Spec.NodeName != nil || s.Spec.Driver != topology.DriverName {
				continue
			}
			if !ownedBy(s.OwnerReferences, class) {
				return fmt.Errorf("pool slice %s owners %+v", s.Name, s.OwnerReferences)
			}
			pools[s.Spec.Pool.Name] = true
			adopted = adopted || s.Name == old.Name
		}
		if len(pools) != 2 || !adopted {
			return fmt.Errorf("pools %v, old slice adopted %t", pools, adopted)
		}
		return nil
	})
}

// ownedBy reports whether refs name class as owner.
func ownedBy(refs []metav1.OwnerReference, class *resourceapi.DeviceClass) bool {
	return slices.ContainsFunc(refs, func(r metav1.OwnerReference) bool {
		return r.UID == class.UID && r.Kind == "DeviceClass" && r.APIVersion == "resource.k8s.io/v1"
	})
}
