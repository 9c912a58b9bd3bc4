package scheduler

import (
	"context"
	"fmt"
	"github.com/gpufabric/gpufabric/pkg/gang/vocab"
	"github.com/gpufabric/gpufabric/test/integration/itest"
	"strings"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/gpufabric/gpufabric/pkg/gang/scheduler"
	"github.com/gpufabric/gpufabric/pkg/topology"
	"github.com/gpufabric/gpufabric/test/integration/framework"
)

// TestSchedulerPlacesGangInOneDomain: a 16-pod gang with a PodGroup claim
// on a fabric-domain channel (from a template, created by
// kube-controller-manager) and per-pod 4-GPU claims (from templates) lands in
// one of two NVL72-like domains (18 nodes × 4 GPUs). The scheduler runs with
// the shipped RBAC rules and publishes the fabric-domain pools itself.
func TestSchedulerPlacesGangInOneDomain(t *testing.T) {
	cp := framework.StartT(t, framework.Options{ControllerManager: true})
	admin := cp.AdminClient(t)
	itest.FabricCluster(t, admin, []string{"a", "b"}, 18, 4)
	const ns = "train"
	itest.GangNamespace(t, admin, ns, 4)
	startScheduler(t, schedulerClient(t, cp, "gpufabric-scheduler"), scheduler.Config{DomainChannels: 4})

	itest.CreateGang(t, admin, ns, "train", 16, 16)
	var st *itest.GangState
	// Bound first, then the commit's last writes (condition, intent cleared).
	itest.Poll(t, "all 16 pods bound and the commit finished", 90*time.Second, func(ctx context.Context) error {
		var err error
		if st, err = itest.ReadGang(ctx, admin, ns); err != nil {
			return err
		}
		if b := st.Bound(); b != 16 {
			return fmt.Errorf("%d of 16 bound", b)
		}
		if len(st.Records) > 0 {
			return fmt.Errorf("commit record not removed yet")
		}
		return nil
	})
	checkPlacedGang(t, admin, st, "train", 16)

	// The PodGroup condition and the Scheduled event.
	itest.Poll(t, "condition and event", 20*time.Second, func(ctx context.Context) error {
		pg, err := admin.SchedulingV1beta1().PodGroups(ns).Get(ctx, "train", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if c := meta.FindStatusCondition(pg.Status.Conditions, schedulingv1beta1.PodGroupInitiallyScheduled); c == nil || c.Status != metav1.ConditionTrue {
			return fmt.Errorf("condition: %+v", c)
		}
		return schedFindEvent(ctx, admin, ns, "train", vocab.EventScheduled, "dom-")
	})
}

// checkPlacedGang checks a placed gang: one shared claim allocated from one
// fabric-domain pool and reserved for the PodGroup only; one GPU claim per pod
// reserved for that pod, on its node; every pod in the shared claim's domain.
func checkPlacedGang(t *testing.T, c kubernetes.Interface, st *itest.GangState, group string, pods int) {
	t.Helper()
	if err := st.Consistent(true); err != nil {
		t.Fatalf("inconsistent: %v", err)
	}
	pg := st.Groups[0]
	if len(pg.Status.ResourceClaimStatuses) != 1 || pg.Status.ResourceClaimStatuses[0].ResourceClaimName == nil {
		t.Fatalf("podgroup claim statuses: %+v", pg.Status.ResourceClaimStatuses)
	}
	sharedName := *pg.Status.ResourceClaimStatuses[0].ResourceClaimName
	domains := map[string]int{}
	nodeOf := map[string]string{}
	for _, p := range st.Pods {
		domains[itest.DomainOf(p.Spec.NodeName)]++
		nodeOf[p.Name] = p.Spec.NodeName
	}
	if len(domains) != 1 {
		t.Errorf("pods span domains: %v", domains)
	}
	perPod := 0
	for _, cl := range st.Claims {
		a := cl.Status.Allocation
		if a == nil {
			t.Errorf("claim %s not allocated", cl.Name)
			continue
		}
		if cl.Name == sharedName {
			want := []string{"podgroups/" + group + "/" + string(pg.UID)}
			if got := schedReservations(cl.Status.ReservedFor); fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("shared claim reserved for %v, want %v", got, want)
			}
			pool := a.Devices.Results[0].Pool
			for d := range domains {
				if pool != topology.FabricDomainPoolName(d) {
					t.Errorf("shared claim from pool %s, pods in %s", pool, d)
				}
			}
			continue
		}
		perPod++
		if len(cl.Status.ReservedFor) != 1 || cl.Status.ReservedFor[0].Resource != "pods" {
			t.Errorf("claim %s reserved for %v", cl.Name, schedReservations(cl.Status.ReservedFor))
			continue
		}
		pod := cl.Status.ReservedFor[0].Name
		for _, r := range a.Devices.Results {
			if r.Pool != nodeOf[pod] {
				t.Errorf("claim %s of pod %s (on %s) has device %s/%s", cl.Name, pod, nodeOf[pod], r.Pool, r.Device)
			}
		}
	}
	if perPod != pods {
		t.Errorf("%d per-pod claims, want %d", perPod, pods)
	}
	if dup, err := itest.DevicesAllocatedTwice(t.Context(), c); err != nil || len(dup) > 0 {
		t.Errorf("devices allocated twice: %v (%v)", dup, err)
	}
}

func schedReservations(refs []resourceapi.ResourceClaimConsumerReference) []string {
	var out []string
	for _, r := range refs {
		out = append(out, r.Resource+"/"+r.Name+"/"+string(r.UID))
	}
	return out
}

// findEvent looks for an events.k8s.io event about a PodGroup or Pod.
func schedFindEvent(ctx context.Context, c kubernetes.Interface, ns, name, reason, noteContains string) error {
	evs, err := c.EventsV1().Events(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	var seen []string
	for _, e := range evs.Items {
		if e.Regarding.Name == name && e.Reason == reason && strings.Contains(e.Note, noteContains) {
			return nil
		}
		seen = append(seen, e.Reason+": "+e.Note)
	}
	return fmt.Errorf("no %s event about %s containing %q; seen %q", reason, name, noteContains, seen)
}
