package scheduler

import (
	"context"
	"fmt"
	"github.com/gpufabric/gpufabric/pkg/gang/vocab"
	"github.com/gpufabric/gpufabric/test/integration/itest"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/gpufabric/gpufabric/pkg/gang/scheduler"
	"github.com/gpufabric/gpufabric/test/integration/framework"
)

// TestSchedulerStarvation: four one-node pods (activeDeadlineSeconds 1h)
// fill two NVLink domains; a two-node gang waits. Past the starvation
// bound it holds the domain closest to fitting it. When a node there
// frees, a new pod without a deadline may not take it (it could delay the
// gang without end), a pod whose deadline ends before the domain's shadow
// may (backfill); when the domain frees, the gang goes there.
func TestSchedulerStarvation(t *testing.T) {
	cp := framework.StartT(t, framework.Options{ControllerManager: true})
	ctx := t.Context()
	admin := cp.AdminClient(t)
	itest.FabricCluster(t, admin, []string{"a", "b"}, 2, 4)
	const ns = "starve"
	itest.GangNamespace(t, admin, ns, 4)
	startScheduler(t, schedulerClient(t, cp, "gpufabric-scheduler"), scheduler.Config{DomainChannels: 4, StarvationBound: 2 * time.Second})
	for i := range 4 {
		createDeadlinePod(t, admin, ns, fmt.Sprintf("small-%d", i), 3600)
	}
	waitBound(t, admin, ns, "small", 4)

	itest.CreateGang(t, admin, ns, "big", 2, 2)
	var domain string
	itest.Poll(t, "the big gang reserves a domain", 30*time.Second, func(ctx context.Context) error {
		if err := schedFindEvent(ctx, admin, ns, "big", vocab.EventReserved, "over the starvation bound"); err != nil {
			return err
		}
		evs, err := admin.EventsV1().Events(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		for _, e := range evs.Items {
			if m := regexp.MustCompile(`holding \S+ (dom-[ab])`).FindStringSubmatch(e.Note); e.Reason == vocab.EventReserved && m != nil {
				domain = m[1]
				return nil
			}
		}
		return fmt.Errorf("no domain in the Reserved event")
	})
	inDomain := podsOnDomain(t, admin, ns, "small-", domain)
	if len(inDomain) != 2 {
		t.Fatalf("small pods in %s: %v, want 2", domain, inDomain)
	}

	// A node of the reserved domain frees: a pod without a deadline may not
	// take it, one that ends within the minute may.
	deletePod(t, admin, ns, inDomain[0])
	createDeadlinePod(t, admin, ns, "endless-0", 0)
	time.Sleep(3 * time.Second)
	if p, err := admin.CoreV1().Pods(ns).Get(ctx, "endless-0", metav1.GetOptions{}); err != nil || p.Spec.NodeName != "" {
		t.Fatalf("a pod without a deadline took the reserved domain's node: %v %v", p.Spec.NodeName, err)
	}
	createDeadlinePod(t, admin, ns, "quick-0", 60)
	waitBound(t, admin, ns, "quick", 1)
	if d := itest.DomainOf(mustGetPod(t, admin, ns, "quick-0").Spec.NodeName); d != domain {
		t.Fatalf("backfilled pod in %s, want the reserved %s", d, domain)
	}

	// The domain frees: the gang goes there; the endless pod still waits.
	deletePod(t, admin, ns, "quick-0")
	deletePod(t, admin, ns, inDomain[1])
	waitBound(t, admin, ns, "big", 2)
	if got := gangDomain(t, admin, ns, "big"); got != domain {
		t.Fatalf("big placed in %s, want its reserved %s", got, domain)
	}
	if p := mustGetPod(t, admin, ns, "endless-0"); p.Spec.NodeName != "" {
		t.Fatalf("endless placed on %s", p.Spec.NodeName)
	}
}

// createDeadlinePod creates a one-node pod of 4 GPUs without a PodGroup,
// with activeDeadlineSeconds when deadline > 0.
func createDeadlinePod(t *testing.T, c kubernetes.Interface, ns, name string, deadline int64) {
	t.Helper()
	p := itest.TemplatePod(ns, name, "")
	p.Spec.SchedulingGroup = nil
	p.Spec.ResourceClaims = p.Spec.ResourceClaims[1:]
	p.Spec.Containers[0].Resources.Claims = p.Spec.Containers[0].Resources.Claims[1:]
	if deadline > 0 {
		p.Spec.ActiveDeadlineSeconds = ptr.To(deadline)
	}
	_, err := c.CoreV1().Pods(ns).Create(t.Context(), p, metav1.CreateOptions{})
	itest.Must(t, "create pod", err)
}

func deletePod(t *testing.T, c kubernetes.Interface, ns, name string) {
	t.Helper()
	itest.Must(t, "delete pod", c.CoreV1().Pods(ns).Delete(t.Context(), name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}))
}

func mustGetPod(t *testing.T, c kubernetes.Interface, ns, name string) *corev1.Pod {
	t.Helper()
	p, err := c.CoreV1().Pods(ns).Get(t.Context(), name, metav1.GetOptions{})
	itest.Must(t, "get pod", err)
	return p
}

// podsOnDomain names the bound pods with prefix in an NVLink domain
// (itest.FabricCluster's dom-<x>), sorted.
func podsOnDomain(t *testing.T, c kubernetes.Interface, ns, prefix, domain string) []string {
	t.Helper()
	pods, err := c.CoreV1().Pods(ns).List(t.Context(), metav1.ListOptions{})
	itest.Must(t, "list pods", err)
	var out []string
	for _, p := range pods.Items {
		if strings.HasPrefix(p.Name, prefix) && p.Spec.NodeName != "" && itest.DomainOf(p.Spec.NodeName) == domain {
			out = append(out, p.Name)
		}
	}
	return out
}
