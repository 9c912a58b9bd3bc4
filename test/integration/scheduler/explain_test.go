package scheduler

import (
	"context"
	"fmt"
	"github.com/gpufabric/gpufabric/pkg/gang/vocab"
	"github.com/gpufabric/gpufabric/test/integration/itest"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/gpufabric/gpufabric/pkg/gang/scheduler"
	"github.com/gpufabric/gpufabric/pkg/topology"
	"github.com/gpufabric/gpufabric/test/integration/framework"
)

// TestSchedulerExplains: every input the scheduler cannot use gets a
// condition and an event that say what is wrong, not a default and not
// silence: annotation values outside their lists (case-sensitive), a
// preferred key no node carries (placed, with a warning event), minCount
// above the members that exist, a claim template that does not exist, and
// a domain whose fabric channels are all in use.
func TestSchedulerExplains(t *testing.T) {
	cp := framework.StartT(t, framework.Options{ControllerManager: true})
	ctx := t.Context()
	admin := cp.AdminClient(t)
	itest.FabricCluster(t, admin, []string{"a"}, 4, 4)
	const ns = "explain"
	itest.GangNamespace(t, admin, ns, 1)
	startScheduler(t, schedulerClient(t, cp, "gpufabric-scheduler"), scheduler.Config{DomainChannels: 1})

	group := func(name string, minCount int32, pods int, annotations map[string]string, mutate func(*corev1.Pod)) {
		pg := itest.TemplateGroup(ns, name, minCount)
		pg.Annotations = annotations
		if name == "pref" {
			pg.Spec.ResourceClaims = nil // no channel: the domain's only one is taken
		}
		_, err := admin.SchedulingV1beta1().PodGroups(ns).Create(ctx, pg, metav1.CreateOptions{})
		itest.Must(t, "create podgroup", err)
		for i := range pods {
			p := itest.TemplatePod(ns, fmt.Sprintf("%s-%d", name, i), name)
			if mutate != nil {
				mutate(p)
			}
			_, err := admin.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
			itest.Must(t, "create pod", err)
		}
	}
	group("holder", 1, 1, nil, nil) // takes the domain's only channel
	waitBound(t, admin, ns, "holder", 1)
	group("maybe", 1, 1, map[string]string{topology.AnnotationRailAlignment: "maybe"}, nil)
	group("capital", 1, 1, map[string]string{topology.AnnotationRailAlignment: "Required"}, nil)
	group("bad-key", 1, 1, map[string]string{topology.AnnotationPreferredTopologyKey: "not a key"}, nil)
	group("three", 3, 2, nil, nil)
	group("no-template", 1, 1, nil, func(p *corev1.Pod) { p.Spec.ResourceClaims[1].ResourceClaimTemplateName = ptr.To("missing") })
	group("no-channel", 1, 1, nil, nil)

	for _, tc := range []struct{ group, reason, message string }{
		{"maybe", schedulingv1beta1.PodGroupReasonUnschedulable, `annotation gpufabric.dev/rail-alignment: value "maybe" is not one of "preferred", "required"`},
		{"capital", schedulingv1beta1.PodGroupReasonUnschedulable, `value "Required" is not one of "preferred", "required"`},
		{"bad-key", schedulingv1beta1.PodGroupReasonUnschedulable, `annotation gpufabric.dev/preferred-topology-key: value "not a key" is not a label key or attribute name`},
		{"three", vocab.ReasonWaitingForMembers, "2 of minCount 3 members exist"},
		{"no-template", vocab.ReasonWaitingForMembers, "uses resource claim template missing, which does not exist in namespace explain"},
		{"no-channel", schedulingv1beta1.PodGroupReasonUnschedulable, "1 of 1 channels of fabric-domain.dom-a in use by explain/holder"},
	} {
		itest.Poll(t, tc.group+" says why", 30*time.Second, func(ctx context.Context) error {
			pg, err := admin.SchedulingV1beta1().PodGroups(ns).Get(ctx, tc.group, metav1.GetOptions{})
			if err != nil {
				return err
			}
			c := findCondition(pg)
			if c == nil || c.Status != metav1.ConditionFalse || c.Reason != tc.reason || !strings.Contains(c.Message, tc.message) {
				return fmt.Errorf("condition %+v", c)
			}
			reason := vocab.EventFailedScheduling
			if tc.reason == vocab.ReasonWaitingForMembers {
				reason = vocab.ReasonWaitingForMembers
			}
			return schedFindEvent(ctx, admin, ns, tc.group, reason, tc.message)
		})
	}

	// A preferred key that no node carries: placed, with a warning event.
	group("pref", 1, 1, map[string]string{topology.AnnotationPreferredTopologyKey: "example.com/row"}, func(p *corev1.Pod) {
		p.Spec.ResourceClaims, p.Spec.Containers[0].Resources.Claims = p.Spec.ResourceClaims[1:], p.Spec.Containers[0].Resources.Claims[1:]
	})
	waitBound(t, admin, ns, "pref", 1)
	itest.Poll(t, "pref placed with a warning", 30*time.Second, func(ctx context.Context) error {
		return schedFindEvent(ctx, admin, ns, "pref", vocab.EventPreferenceIgnored, "preferred topology key example.com/row: no node carries it")
	})
}
