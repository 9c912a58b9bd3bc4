package scheduler

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/gpufabric/gpufabric/pkg/gang/scheduler"
	"github.com/gpufabric/gpufabric/pkg/gang/vocab"
	"github.com/gpufabric/gpufabric/test/integration/framework"
	"github.com/gpufabric/gpufabric/test/integration/itest"
)

// TestSchedulerStarvationFairBetweenTenants: tenant A's gangs that wait
// for a whole NVLink domain starve and hold at most one domain (the
// default --starvation-reservations-per-namespace), so tenant B's 4-GPU
// gangs still go to the two other domains; B's gang that only the
// reserved domain could take says in its refusal that nodes are reserved
// for a starving gang of another namespace, without naming A. Before, A's
// gangs reserved every domain and B's gang waited with 12 GPUs free,
// refused with "no node carries this label". Tenants act with their own
// namespace-scoped tokens.
func TestSchedulerStarvationFairBetweenTenants(t *testing.T) {
	cp := framework.StartT(t, framework.Options{ControllerManager: true})
	admin := cp.AdminClient(t)
	itest.FabricCluster(t, admin, []string{"a", "b", "c"}, 2, 4)
	const nsA, nsB, fill = "tenant-a", "tenant-b", "filler"
	for _, ns := range []string{nsA, nsB, fill} {
		itest.GangNamespace(t, admin, ns, 4)
	}
	tenantA, tenantB := tenantClient(t, cp, nsA, nsA), tenantClient(t, cp, nsB, nsB)
	startScheduler(t, schedulerClient(t, cp, "gpufabric-scheduler"), scheduler.Config{DomainChannels: 4, StarvationBound: 2 * time.Second})

	// One node of each domain busy for an hour: 4 of 8 GPUs free in each.
	for i := range 6 {
		createDeadlinePod(t, admin, fill, fmt.Sprintf("fill-%d", i), 3600)
	}
	waitBound(t, admin, fill, "fill", 6)
	for _, d := range []string{"dom-a", "dom-b", "dom-c"} {
		deletePod(t, admin, fill, podsOnDomain(t, admin, fill, "fill-", d)[0])
	}

	// Tenant A: three gangs that each need a whole domain, refused until
	// they starve.
	for i := range 3 {
		itest.CreateGang(t, tenantA, nsA, fmt.Sprintf("never-%d", i), 2, 2)
	}
	var reserved string
	itest.Poll(t, "one of A's gangs reserves a domain, the others say they hold none", 60*time.Second, func(ctx context.Context) error {
		holding, refused := 0, 0
		for i := range 3 {
			name := fmt.Sprintf("never-%d", i)
			if ev := reservedEvent(ctx, admin, nsA, name); ev != "" {
				holding++
				reserved = ev
			}
			if groupCondition(ctx, admin, nsA, name, metav1.ConditionFalse, schedulingv1beta1.PodGroupReasonUnschedulable,
				"other gangs of namespace tenant-a hold its limit of starvation reservations") == nil {
				refused++
			}
		}
		if holding != 1 || refused != 2 {
			return fmt.Errorf("%d of A's gangs hold a domain (%s), %d say they may not; want 1 and 2", holding, reserved, refused)
		}
		return nil
	})
	t.Logf("A's reservation: %s", reserved)

	// Tenant B: two 4-GPU gangs go to the two domains A does not hold.
	for _, g := range []string{"small-0", "small-1"} {
		itest.CreateGang(t, tenantB, nsB, g, 1, 1)
		waitBound(t, admin, nsB, g, 1)
		if d := gangDomain(t, admin, nsB, g); strings.Contains(reserved, d) {
			t.Fatalf("B's gang %s placed in %s, the domain A reserved", g, d)
		}
	}
	// The third fits only in the reserved domain: refused, and says why.
	itest.CreateGang(t, tenantB, nsB, "small-2", 1, 1)
	itest.Poll(t, "B's third gang names the reservation", 30*time.Second, func(ctx context.Context) error {
		return groupCondition(ctx, admin, nsB, "small-2", metav1.ConditionFalse, schedulingv1beta1.PodGroupReasonUnschedulable,
			"2 reserved for a starving gang of another namespace")
	})
	pg, err := admin.SchedulingV1beta1().PodGroups(nsB).Get(t.Context(), "small-2", metav1.GetOptions{})
	itest.Must(t, "get B's gang", err)
	if msg := meta.FindStatusCondition(pg.Status.Conditions, schedulingv1beta1.PodGroupInitiallyScheduled).Message; strings.Contains(msg, nsA) || strings.Contains(msg, "never-") {
		t.Errorf("B's refusal names tenant A's workloads: %q", msg)
	}
	twice, err := itest.DevicesAllocatedTwice(t.Context(), admin)
	itest.Must(t, "list allocations", err)
	if len(twice) > 0 {
		t.Errorf("devices allocated twice: %v", twice)
	}
}

// reservedEvent returns the note of the Reserved event about a gang, "" for
// none.
func reservedEvent(ctx context.Context, c kubernetes.Interface, ns, name string) string {
	evs, err := c.EventsV1().Events(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return ""
	}
	for _, e := range evs.Items {
		if e.Regarding.Name == name && e.Reason == vocab.EventReserved {
			return e.Note
		}
	}
	return ""
}

// TestSchedulerChannelsOnlyForGPUGangs: a tenant's GPU-less gangs, each
// asking for a fabric-domain channel, get none (refused, saying why), so
// another tenant's GPU gang still gets one of the domain's two channels.
// Before, the two GPU-less gangs took both channels and the GPU gang was
// refused with "2 of 2 channels ... in use".
func TestSchedulerChannelsOnlyForGPUGangs(t *testing.T) {
	cp := framework.StartT(t, framework.Options{ControllerManager: true})
	admin := cp.AdminClient(t)
	itest.FabricCluster(t, admin, []string{"a"}, 2, 4)
	const nsA, nsB = "tenant-a", "tenant-b"
	for _, ns := range []string{nsA, nsB} {
		itest.GangNamespace(t, admin, ns, 4)
	}
	tenantA, tenantB := tenantClient(t, cp, nsA, nsA), tenantClient(t, cp, nsB, nsB)
	startScheduler(t, schedulerClient(t, cp, "gpufabric-scheduler"), scheduler.Config{DomainChannels: 2})

	for _, g := range []string{"cpu-0", "cpu-1"} {
		_, err := tenantA.SchedulingV1beta1().PodGroups(nsA).Create(t.Context(), itest.TemplateGroup(nsA, g, 1), metav1.CreateOptions{})
		itest.Must(t, "create podgroup", err)
		p := itest.TemplatePod(nsA, g+"-0", g)
		p.Spec.ResourceClaims = p.Spec.ResourceClaims[:1] // the channel only
		p.Spec.Containers[0].Resources.Claims = p.Spec.Containers[0].Resources.Claims[:1]
		_, err = tenantA.CoreV1().Pods(nsA).Create(t.Context(), p, metav1.CreateOptions{})
		itest.Must(t, "create GPU-less pod", err)
	}
	for _, g := range []string{"cpu-0", "cpu-1"} {
		itest.Poll(t, g+" refused for using no GPU", 30*time.Second, func(ctx context.Context) error {
			return groupCondition(ctx, admin, nsA, g, metav1.ConditionFalse, schedulingv1beta1.PodGroupReasonUnschedulable,
				"but no member of the gang uses a GPU of that NVLink domain")
		})
	}
	itest.CreateGang(t, tenantB, nsB, "gpu", 1, 1)
	waitBound(t, admin, nsB, "gpu", 1)
	st, err := itest.ReadGang(t.Context(), admin, nsA)
	itest.Must(t, "read tenant A", err)
	if n := st.Allocated(); n != 0 {
		t.Errorf("tenant A's GPU-less gangs hold %d allocated claims, want none", n)
	}
}
