package scheduler

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpufabric/gpufabric/pkg/gang/scheduler"
	"github.com/gpufabric/gpufabric/pkg/gang/vocab"
	"github.com/gpufabric/gpufabric/test/integration/framework"
	"github.com/gpufabric/gpufabric/test/integration/itest"
)

// TestSchedulerSlowSelectorsTimeOut: a tenant, with its own token and only
// its namespace's rights, makes a claim template whose 32 CEL selectors
// the apiserver accepts (their estimated cost is within its limit) but
// that each take longer than the allocator's time on a GPU. Its gang is
// refused with reason TimedOut and a message that starts "timed out" and
// names the claim by its namespace-local name; another namespace's gang
// is placed meanwhile.
func TestSchedulerSlowSelectorsTimeOut(t *testing.T) {
	cp := framework.StartT(t, framework.Options{ControllerManager: true})
	ctx := t.Context()
	admin := cp.AdminClient(t)
	itest.FabricCluster(t, admin, []string{"a", "b"}, 4, 4)
	const slowNS, otherNS = "slow", "other"
	itest.GangNamespace(t, admin, slowNS, 1)
	itest.GangNamespace(t, admin, otherNS, 1)
	tenant := tenantClient(t, cp, "slow-tenant", slowNS)

	l := "[" + strings.TrimSuffix(strings.Repeat("1,", 30), ",") + "]"
	expr := l + `.all(i, ` + l + `.all(j, ` + l + `.all(k, device.attributes["gpufabric.dev"].nvlinkDomain.lowerAscii() != "zz")))`
	tpl := itest.ClaimTemplate(slowNS, "slow", "gpu.gpufabric.dev", 1)
	for range 32 {
		tpl.Spec.Spec.Devices.Requests[0].Exactly.Selectors = append(tpl.Spec.Spec.Devices.Requests[0].Exactly.Selectors,
			resourceapi.DeviceSelector{CEL: &resourceapi.CELDeviceSelector{Expression: expr}})
	}
	_, err := tenant.ResourceV1().ResourceClaimTemplates(slowNS).Create(ctx, tpl, metav1.CreateOptions{})
	itest.Must(t, "tenant creates the slow template (the apiserver accepts its selectors)", err)
	_, err = tenant.SchedulingV1beta1().PodGroups(slowNS).Create(ctx, itest.TemplateGroup(slowNS, "dear", 1), metav1.CreateOptions{})
	itest.Must(t, "tenant creates podgroup", err)
	p := itest.TemplatePod(slowNS, "dear-0", "dear")
	p.Spec.ResourceClaims[1].ResourceClaimTemplateName = &tpl.Name
	_, err = tenant.CoreV1().Pods(slowNS).Create(ctx, p, metav1.CreateOptions{})
	itest.Must(t, "tenant creates pod", err)

	startScheduler(t, schedulerClient(t, cp, "gpufabric-scheduler"), scheduler.Config{DomainChannels: 4})
	itest.CreateGang(t, admin, otherNS, "fine", 2, 2)
	waitBound(t, admin, otherNS, "fine", 2)

	itest.Poll(t, "the slow gang refused as timed out", 60*time.Second, func(ctx context.Context) error {
		pg, err := admin.SchedulingV1beta1().PodGroups(slowNS).Get(ctx, "dear", metav1.GetOptions{})
		if err != nil {
			return err
		}
		c := findCondition(pg)
		if c == nil || c.Status != metav1.ConditionFalse || c.Reason != vocab.ReasonTimedOut {
			return fmt.Errorf("condition %+v", c)
		}
		// The pod's GPU claim, made by kube-controller-manager from the
		// template: "dear-0-gpus-<suffix>".
		if !strings.HasPrefix(c.Message, `timed out: `) || !strings.Contains(c.Message, `claim "dear-0-gpus-`) || strings.Contains(c.Message, slowNS+"/dear-0-gpus") {
			return fmt.Errorf("message %q", c.Message)
		}
		return nil
	})
	st, err := itest.ReadGang(ctx, admin, slowNS)
	itest.Must(t, "read", err)
	if st.Bound() != 0 {
		t.Errorf("%d pods of the slow gang bound", st.Bound())
	}
}
