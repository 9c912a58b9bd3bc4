package scheduler

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/gpufabric/gpufabric/pkg/gang/scheduler"
	"github.com/gpufabric/gpufabric/pkg/gang/vocab"
	"github.com/gpufabric/gpufabric/test/integration/framework"
	"github.com/gpufabric/gpufabric/test/integration/itest"
)

// TestSchedulerReplaceInPlace on the real control plane: the node of a
// running Pod-mode gang's member turns NotReady; past the node failure
// grace the scheduler evicts the member (MembersLost=True,
// ReplacingInPlace), the recreated member is placed in the gang's domain
// (ReplacedInPlace). A second member lost with no replacement within the
// PodGroup's bound fails the PodGroup (policy Fail: Failed=True,
// NoReplacement, the running members evicted).
func TestSchedulerReplaceInPlace(t *testing.T) {
	cp := framework.StartT(t, framework.Options{ControllerManager: true})
	ctx := t.Context()
	admin := cp.AdminClient(t)
	itest.FabricCluster(t, admin, []string{"a"}, 4, 4)
	const ns = "replace"
	itest.GangNamespace(t, admin, ns, 4)
	startScheduler(t, schedulerClient(t, cp, "gpufabric-scheduler"), scheduler.Config{DomainChannels: 4,
		Replace: scheduler.ReplaceConfig{NodeFailureGrace: time.Second}})

	pg := itest.TemplateGroup(ns, "g", 3)
	pg.Annotations = map[string]string{vocab.AnnotationOnMemberLoss: vocab.PolicyFail, vocab.AnnotationReplacementTimeout: "4s"}
	_, err := admin.SchedulingV1beta1().PodGroups(ns).Create(ctx, pg, metav1.CreateOptions{})
	itest.Must(t, "create podgroup", err)
	for i := range 3 {
		itest.CreateMember(t, admin, ns, "g", i)
	}
	waitBound(t, admin, ns, "g", 3)

	start := time.Now()
	notReady(t, admin, podNode(t, admin, ns, "g-1"))
	waitReason(t, admin, ns, "g", vocab.ConditionMembersLost, vocab.ReasonReplacingInPlace, "(node_not_ready)")
	itest.Poll(t, "g-1 evicted", 20*time.Second, func(ctx context.Context) error {
		p, err := admin.CoreV1().Pods(ns).Get(ctx, "g-1", metav1.GetOptions{})
		if err == nil && p.DeletionTimestamp == nil {
			return fmt.Errorf("g-1 still runs")
		}
		return nil
	})
	t.Logf("NotReady to the lost member evicted: %v (grace 1s)", time.Since(start))
	start = time.Now()
	itest.CreateMember(t, admin, ns, "g", 3) // its controller's replacement
	waitReason(t, admin, ns, "g", vocab.ConditionMembersLost, vocab.ReasonReplacedInPlace, "replaced in place")
	t.Logf("replacement created to ReplacedInPlace: %v", time.Since(start))
	itest.Poll(t, "ReplacedInPlace event", 20*time.Second, func(ctx context.Context) error {
		return schedFindEvent(ctx, admin, ns, "g", vocab.EventReplacedInPlace, "replaced in place")
	})

	notReady(t, admin, podNode(t, admin, ns, "g-2"))
	waitReason(t, admin, ns, "g", vocab.ConditionFailed, vocab.ReasonNoReplacement, "policy Fail")
	itest.Poll(t, "the failed gang's members evicted", 20*time.Second, func(ctx context.Context) error {
		for _, name := range []string{"g-0", "g-3"} {
			if p, err := admin.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{}); err == nil && p.DeletionTimestamp == nil {
				return fmt.Errorf("%s still runs", name)
			}
		}
		return nil
	})
}

// TestSchedulerReplaceWholeInPlace on the real control plane (kube-
// controller-manager, kwok): a node of a running disruptionMode All gang
// gets an untolerated NoExecute taint; the gang is restarted whole at once
// (never left partly running) and its recreated members go back to the
// domain it ran in, which still fits them, although another domain fits
// them better (best fit would choose it).
func TestSchedulerReplaceWholeInPlace(t *testing.T) {
	cp := framework.StartT(t, framework.Options{ControllerManager: true, Kwok: true})
	ctx := t.Context()
	admin := cp.AdminClient(t)
	itest.KwokFabric(t, admin, []string{"a"}, 4, 4)
	itest.KwokFabric(t, admin, []string{"b"}, 2, 4)
	const ns = "whole"
	itest.GangNamespace(t, admin, ns, 4)
	startScheduler(t, schedulerClient(t, cp, "gpufabric-scheduler"), scheduler.Config{DomainChannels: 4})

	itest.CreateGang(t, admin, ns, "filler", 2, 2) // takes b, the best fit
	waitBound(t, admin, ns, "filler", 2)
	pg := itest.TemplateGroup(ns, "g", 2)
	pg.Spec.DisruptionMode = &schedulingv1beta1.DisruptionMode{All: &schedulingv1beta1.AllDisruptionMode{}}
	_, err := admin.SchedulingV1beta1().PodGroups(ns).Create(ctx, pg, metav1.CreateOptions{})
	itest.Must(t, "create podgroup", err)
	var pods []*corev1.Pod
	for i := range 4 { // without the template's toleration of every taint
		p := itest.TemplatePod(ns, fmt.Sprintf("g-%d", i), "g")
		p.Spec.Tolerations = nil
		pods = append(pods, p)
	}
	create := func(p *corev1.Pod) {
		_, err := admin.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
		itest.Must(t, "create "+p.Name, err)
	}
	create(pods[0])
	create(pods[1])
	waitBound(t, admin, ns, "g", 2)
	if n := podNode(t, admin, ns, "g-0"); n[:1] != "a" {
		t.Fatalf("g runs on %s, want domain a", n)
	}
	itest.Must(t, "delete the filler", admin.SchedulingV1beta1().PodGroups(ns).Delete(ctx, "filler", metav1.DeleteOptions{}))
	for i := range 2 {
		itest.Must(t, "delete filler pod", admin.CoreV1().Pods(ns).Delete(ctx, fmt.Sprintf("filler-%d", i), metav1.DeleteOptions{}))
	}

	broken := podNode(t, admin, ns, "g-1")
	n, err := admin.CoreV1().Nodes().Get(ctx, broken, metav1.GetOptions{})
	itest.Must(t, "get node", err)
	n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: "example.com/broken", Effect: corev1.TaintEffectNoExecute, TimeAdded: ptr.To(metav1.Now())})
	start := time.Now()
	_, err = admin.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
	itest.Must(t, "taint the node", err)
	itest.Poll(t, "the old members gone", 30*time.Second, func(ctx context.Context) error {
		for _, name := range []string{"g-0", "g-1"} {
			if p, err := admin.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				return fmt.Errorf("%s still there (deleting: %v, err %v)", name, p.DeletionTimestamp != nil, err)
			}
		}
		return nil
	})
	t.Logf("taint to the whole gang gone: %v", time.Since(start))
	create(pods[2]) // the Job's new members
	create(pods[3])
	itest.Poll(t, "the new members bound", 30*time.Second, func(ctx context.Context) error {
		for _, name := range []string{"g-2", "g-3"} {
			p, err := admin.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil || p.Spec.NodeName == "" {
				return fmt.Errorf("%s not bound", name)
			}
			if p.Spec.NodeName[:1] != "a" || p.Spec.NodeName == broken {
				t.Fatalf("%s placed on %s, want a node of its previous domain a other than %s", name, p.Spec.NodeName, broken)
			}
		}
		return nil
	})
	waitReason(t, admin, ns, "g", schedulingv1beta1.DisruptionTarget, vocab.ReasonGangRestarted, "")
}

// TestSchedulerReplaceWholePolicies on the real control plane: two
// disruptionMode All gangs lose a member to an untolerated NoExecute
// taint and restart whole; their previous domains have no room for them
// now (one usable node of two), two other domains are empty. Policy
// Restart places the new gang in another domain at once; policy Fail
// keeps it waiting for its previous domain and, past its 3 s bound from
// the taint, fails the PodGroup (Failed=True, NoReplacement) with nothing
// of it placed. The scheduler restarts between the loss and the new
// members: the previous domain is read back from the condition.
func TestSchedulerReplaceWholePolicies(t *testing.T) {
	cp := framework.StartT(t, framework.Options{ControllerManager: true, Kwok: true})
	ctx := t.Context()
	admin := cp.AdminClient(t)
	itest.KwokFabric(t, admin, []string{"a", "b", "c", "d"}, 2, 4)
	const ns = "policies"
	itest.GangNamespace(t, admin, ns, 4)
	client := schedulerClient(t, cp, "gpufabric-scheduler")
	first := startScheduler(t, client, scheduler.Config{DomainChannels: 4})
	create := func(name, group string) {
		p := itest.TemplatePod(ns, name, group)
		p.Spec.Tolerations = nil // without the template's toleration of every taint
		_, err := admin.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
		itest.Must(t, "create "+name, err)
	}
	groups := []string{"restart", "fail"}
	prev := map[string]string{}
	for _, group := range groups {
		pg := itest.TemplateGroup(ns, group, 2)
		pg.Spec.DisruptionMode = &schedulingv1beta1.DisruptionMode{All: &schedulingv1beta1.AllDisruptionMode{}}
		pg.Annotations = map[string]string{vocab.AnnotationOnMemberLoss: strings.ToUpper(group[:1]) + group[1:], vocab.AnnotationReplacementTimeout: "3s"}
		_, err := admin.SchedulingV1beta1().PodGroups(ns).Create(ctx, pg, metav1.CreateOptions{})
		itest.Must(t, "create podgroup", err)
		create(group+"-0", group)
		create(group+"-1", group)
		waitBound(t, admin, ns, group, 2)
		prev[group] = podNode(t, admin, ns, group+"-0")[:1]
	}
	for _, group := range groups {
		n, err := admin.CoreV1().Nodes().Get(ctx, podNode(t, admin, ns, group+"-1"), metav1.GetOptions{})
		itest.Must(t, "get node", err)
		n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: "example.com/broken", Effect: corev1.TaintEffectNoExecute, TimeAdded: ptr.To(metav1.Now())})
		_, err = admin.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
		itest.Must(t, "taint the node", err)
	}
	itest.Poll(t, "the old members gone", 30*time.Second, func(ctx context.Context) error {
		for _, group := range groups {
			for _, name := range []string{group + "-0", group + "-1"} {
				if _, err := admin.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
					return fmt.Errorf("%s still there (err %v)", name, err)
				}
			}
		}
		return nil
	})
	// A new scheduler (a restart, a new leader) knows the fail gang's
	// previous domain only from its condition.
	waitReason(t, admin, ns, "fail", vocab.ConditionMembersLost, vocab.ReasonReplacingInPlace, `previous NVLink domain "`)
	first.stop()
	startScheduler(t, client, scheduler.Config{DomainChannels: 4})
	for _, group := range groups { // the Job's new members
		create(group+"-2", group)
		create(group+"-3", group)
	}
	itest.Poll(t, "the restart policy's new members bound elsewhere", 30*time.Second, func(ctx context.Context) error {
		for _, name := range []string{"restart-2", "restart-3"} {
			if n := podNode(t, admin, ns, name); n == "" || n[:1] == prev["restart"] {
				return fmt.Errorf("%s on %q, want a domain other than its previous %s", name, n, prev["restart"])
			}
		}
		return nil
	})
	waitReason(t, admin, ns, "fail", vocab.ConditionFailed, vocab.ReasonNoReplacement, "not placed in its previous domain within 3s")
	for _, name := range []string{"fail-2", "fail-3"} {
		if n := podNode(t, admin, ns, name); n != "" {
			t.Errorf("%s of the failed gang placed on %s", name, n)
		}
	}
}

// podNode is the node a pod is bound to.
func podNode(t *testing.T, c kubernetes.Interface, ns, name string) string {
	t.Helper()
	p, err := c.CoreV1().Pods(ns).Get(t.Context(), name, metav1.GetOptions{})
	itest.Must(t, "get "+name, err)
	return p.Spec.NodeName
}

// notReady sets a node's Ready condition False, as the node lifecycle
// controller does for a node that stopped reporting.
func notReady(t *testing.T, c kubernetes.Interface, name string) {
	t.Helper()
	n, err := c.CoreV1().Nodes().Get(t.Context(), name, metav1.GetOptions{})
	itest.Must(t, "get node", err)
	n.Status.Conditions = append(n.Status.Conditions, corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionFalse,
		Reason: "KubeletNotReady", LastTransitionTime: metav1.Now(), LastHeartbeatTime: metav1.Now()})
	_, err = c.CoreV1().Nodes().UpdateStatus(t.Context(), n, metav1.UpdateOptions{})
	itest.Must(t, "node NotReady", err)
}

// waitReason waits for the PodGroup's condition typ to carry reason and a
// message containing message.
func waitReason(t *testing.T, c kubernetes.Interface, ns, group, typ, reason, message string) {
	t.Helper()
	itest.Poll(t, fmt.Sprintf("%s %s=%s", group, typ, reason), 30*time.Second, func(ctx context.Context) error {
		pg, err := c.SchedulingV1beta1().PodGroups(ns).Get(ctx, group, metav1.GetOptions{})
		if err != nil {
			return err
		}
		cond := meta.FindStatusCondition(pg.Status.Conditions, typ)
		if cond == nil || cond.Reason != reason || !strings.Contains(cond.Message, message) {
			return fmt.Errorf("condition %+v", cond)
		}
		return nil
	})
}
