package soak

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	resourceapi "k8s.io/api/resource/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/gpufabric/gpufabric/pkg/topology"
	"github.com/gpufabric/gpufabric/test/integration/framework"
	"github.com/gpufabric/gpufabric/test/integration/itest"
)

// Environment of the adversarial half of TestChaosSoak.
const (
	// soakAdversaryEnv turns the adversarial tenant off ("0"); on by default.
	soakAdversaryEnv = "GPUFABRIC_SOAK_ADVERSARY"
	// soakAdversaryGangsEnv is how many never-fitting gangs it keeps
	// (default 20; `make soak` raises it).
	soakAdversaryGangsEnv = "GPUFABRIC_SOAK_ADVERSARY_GANGS"
)

// Shape of what the adversarial tenant sends.
const (
	adversaryNS = "soak-evil"
	// hugeValue is the size of the invalid annotation value it rewrites.
	hugeValue = 200 << 10
	// slowSelectors is how many slow but valid CEL selectors its slow
	// claim carries before the one no device satisfies (the API allows 32
	// per request).
	slowSelectors = 31
	// channelGangs is how many GPU-less one-pod gangs ask a fabric channel.
	channelGangs = 12
)

// adversary is a tenant with namespace rights only (its own identity on the
// real apiserver) that tries to stall, flood and starve the others: gangs
// that never fit, a huge invalid annotation rewritten every second, a claim
// whose selectors are slow, unallocated claims created and deleted in a
// loop (wake-ups), and GPU-less gangs asking fabric channels.
type adversary struct {
	s      *soak
	c      kubernetes.Interface
	gangs  int
	writes int // its writes, for the report
}

// newAdversary creates the tenant's namespace, identity and templates.
func newAdversary(s *soak, gangs int) *adversary {
	t := s.t
	itest.GangNamespace(t, s.admin, adversaryNS, 8)
	_, err := s.admin.ResourceV1().ResourceClaimTemplates(adversaryNS).Create(t.Context(), slowTemplate(), metav1.CreateOptions{})
	itest.Must(t, "create slow template", err)
	c := s.cp.ClientWithRules(t, "soak-evil", nil)
	itest.Must(t, "grant tenant", framework.GrantNamespaceRules(t.Context(), s.admin, "soak-evil", adversaryNS, []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"*"}},
		{APIGroups: []string{schedulingv1beta1.GroupName}, Resources: []string{"podgroups"}, Verbs: []string{"*"}},
		{APIGroups: []string{resourceapi.GroupName}, Resources: []string{"resourceclaims", "resourceclaimtemplates"}, Verbs: []string{"*"}},
	}))
	return &adversary{s: s, c: c, gangs: gangs}
}

// run sends the attacks until ctx ends. Errors are the tenant's problem
// (the apiserver may refuse some of its objects) and only counted.
func (a *adversary) run(ctx context.Context) {
	a.createNeverFitting(ctx)
	a.createChannelGangs(ctx)
	a.createSlowGang(ctx)
	for i := 0; ctx.Err() == nil; i++ {
		a.flood(ctx, i)
		a.churnClaim(ctx, i)
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

// createNeverFitting creates gangs of 7 × 8 GPUs: more than any domain has.
func (a *adversary) createNeverFitting(ctx context.Context) {
	for i := range a.gangs {
		a.gang(ctx, fmt.Sprintf("never-%03d", i), 7, itest.GPUTemplate, nil)
	}
}

// createChannelGangs creates one-pod gangs that ask only a fabric channel.
func (a *adversary) createChannelGangs(ctx context.Context) {
	for i := range channelGangs {
		name := fmt.Sprintf("channel-%02d", i)
		pg := itest.TemplateGroup(adversaryNS, name, 1)
		if _, err := a.c.SchedulingV1beta1().PodGroups(adversaryNS).Create(ctx, pg, metav1.CreateOptions{}); err != nil {
			continue
		}
		pod := itest.TemplatePod(adversaryNS, name+"-0", name)
		pod.Spec.Containers[0].Resources.Claims = pod.Spec.Containers[0].Resources.Claims[:1]
		pod.Spec.ResourceClaims = pod.Spec.ResourceClaims[:1]
		a.writes++
		_, _ = a.c.CoreV1().Pods(adversaryNS).Create(ctx, pod, metav1.CreateOptions{})
	}
}

// createSlowGang creates a 4-pod gang whose GPU claims carry slow selectors
// that no device satisfies.
func (a *adversary) createSlowGang(ctx context.Context) {
	a.gang(ctx, "slow", 4, "slow", nil)
}

// flood rewrites a huge invalid annotation on a never-fitting gang.
func (a *adversary) flood(ctx context.Context, i int) {
	value := fmt.Sprintf("%d-%s", i, strings.Repeat("x", hugeValue))
	if i == 0 {
		a.gang(ctx, "flood", 7, itest.GPUTemplate, map[string]string{topology.AnnotationRailAlignment: value})
		return
	}
	pg, err := a.c.SchedulingV1beta1().PodGroups(adversaryNS).Get(ctx, "flood", metav1.GetOptions{})
	if err != nil {
		return
	}
	pg.Annotations[topology.AnnotationRailAlignment] = value
	a.writes++
	_, _ = a.c.SchedulingV1beta1().PodGroups(adversaryNS).Update(ctx, pg, metav1.UpdateOptions{})
}

// churnClaim creates and deletes an unallocated claim.
func (a *adversary) churnClaim(ctx context.Context, i int) {
	name := fmt.Sprintf("churn-%d", i)
	if _, err := a.c.ResourceV1().ResourceClaims(adversaryNS).Create(ctx, itest.GPUClaim(adversaryNS, name, 1), metav1.CreateOptions{}); err != nil {
		return
	}
	_ = a.c.ResourceV1().ResourceClaims(adversaryNS).Delete(ctx, name, metav1.DeleteOptions{})
	a.writes += 2
}

// gang creates a PodGroup of pods members, each with the claim template gpus.
func (a *adversary) gang(ctx context.Context, name string, pods int, gpus string, annotations map[string]string) {
	pg := itest.TemplateGroup(adversaryNS, name, int32(pods))
	pg.Annotations = annotations
	if _, err := a.c.SchedulingV1beta1().PodGroups(adversaryNS).Create(ctx, pg, metav1.CreateOptions{}); err != nil {
		return
	}
	a.writes++
	for j := range pods {
		pod := itest.TemplatePod(adversaryNS, fmt.Sprintf("%s-%d", name, j), name)
		for k := range pod.Spec.ResourceClaims {
			if pod.Spec.ResourceClaims[k].Name == itest.GPUTemplate {
				pod.Spec.ResourceClaims[k].ResourceClaimTemplateName = ptr.To(gpus)
			}
		}
		a.writes++
		_, _ = a.c.CoreV1().Pods(adversaryNS).Create(ctx, pod, metav1.CreateOptions{})
	}
}

// slowTemplate asks 4 GPUs through selectors that are valid and within the
// API's cost limit but slow to evaluate, and that no device satisfies.
func slowTemplate() *resourceapi.ResourceClaimTemplate {
	tpl := itest.ClaimTemplate(adversaryNS, "slow", topology.GPUDeviceClass, 4)
	nums := make([]string, 60)
	for i := range nums {
		nums[i] = fmt.Sprint(i)
	}
	list := "[" + strings.Join(nums, ",") + "]"
	var sel []resourceapi.DeviceSelector
	for i := range slowSelectors {
		expr := fmt.Sprintf(`%s.all(i, %s.all(j, string(i * j + %d) != "never" + device.driver))`, list, list, i)
		sel = append(sel, resourceapi.DeviceSelector{CEL: &resourceapi.CELDeviceSelector{Expression: expr}})
	}
	sel = append(sel, resourceapi.DeviceSelector{CEL: &resourceapi.CELDeviceSelector{Expression: `device.driver == "nobody"`}})
	tpl.Spec.Spec.Devices.Requests[0].Exactly.Selectors = sel
	return tpl
}

// adversaryPods counts the tenant's pods that are bound, for the report:
// none of its gangs can fit, so any bound pod is a finding.
func adversaryPods(ctx context.Context, c kubernetes.Interface) (total, bound int) {
	pods, err := c.CoreV1().Pods(adversaryNS).List(ctx, metav1.ListOptions{})
	if err != nil {
		return 0, 0
	}
	for _, p := range pods.Items {
		total++
		if p.Spec.NodeName != "" && !gpuLess(&p) {
			bound++
		}
	}
	return total, bound
}

// longestMessage is the longest condition message the scheduler wrote on
// the adversary's PodGroups and pods (each is bounded by report.MaxMessage
// whatever the tenant wrote; its flood gang carries a 200 KiB annotation).
func longestMessage(ctx context.Context, c kubernetes.Interface) (int, string) {
	longest, where := 0, ""
	note := func(kind, name string, msgs ...string) {
		for _, m := range msgs {
			if len(m) > longest {
				longest, where = len(m), kind+" "+name
			}
		}
	}
	if pgs, err := c.SchedulingV1beta1().PodGroups(adversaryNS).List(ctx, metav1.ListOptions{}); err == nil {
		for _, pg := range pgs.Items {
			for _, cond := range pg.Status.Conditions {
				note("podgroup", pg.Name, cond.Message)
			}
		}
	}
	if pods, err := c.CoreV1().Pods(adversaryNS).List(ctx, metav1.ListOptions{}); err == nil {
		for _, p := range pods.Items {
			for _, cond := range p.Status.Conditions {
				note("pod", p.Name, cond.Message)
			}
		}
	}
	return longest, where
}

// gpuLess reports whether p is one of the channel-only pods.
func gpuLess(p *corev1.Pod) bool { return len(p.Spec.ResourceClaims) == 1 }
