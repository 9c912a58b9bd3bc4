package scheduler

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/gpufabric/gpufabric/pkg/gang/vocab"
	"github.com/gpufabric/gpufabric/test/integration/itest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	resourceapi "k8s.io/api/resource/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/gpufabric/gpufabric/pkg/gang/commit"
	"github.com/gpufabric/gpufabric/pkg/gang/scheduler"
	"github.com/gpufabric/gpufabric/test/integration/framework"
)

// tenantClient is a user with full rights on PodGroups, pods and claims of
// one namespace, and nothing else.
func tenantClient(t *testing.T, cp *framework.ControlPlane, user, ns string) kubernetes.Interface {
	t.Helper()
	c := cp.ClientWithRules(t, user, nil)
	itest.Must(t, "grant tenant", framework.GrantNamespaceRules(t.Context(), cp.AdminClient(t), user, ns, []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"*"}},
		{APIGroups: []string{schedulingv1beta1.GroupName}, Resources: []string{"podgroups"}, Verbs: []string{"*"}},
		{APIGroups: []string{resourceapi.GroupName}, Resources: []string{"resourceclaims", "resourceclaimtemplates"}, Verbs: []string{"*"}},
	}))
	return c
}

// TestSchedulerTrust: recovery cannot be steered. A tenant with only
// namespace rights forges the old intent annotation on its PodGroup, naming
// a placed gang's claims; commit records written with the scheduler's own
// identity (as if RBAC and admission had both failed) that are forged,
// malformed or oversized release nothing and bind nothing; each gets an
// event on its group; and the scheduler keeps placing other gangs.
func TestSchedulerTrust(t *testing.T) {
	cp := framework.StartT(t, framework.Options{ControllerManager: true})
	admin := cp.AdminClient(t)
	itest.FabricCluster(t, admin, []string{"a", "b"}, 4, 4)
	sched := schedulerClient(t, cp, "gpufabric-scheduler")
	const ns = "tenant"
	itest.GangNamespace(t, admin, ns, 4)
	tenant := tenantClient(t, cp, "tenant", ns)
	_, err := admin.ResourceV1().ResourceClaimTemplates(ns).Create(t.Context(), itest.ClaimTemplate(ns, "huge", "gpu.gpufabric.dev", 8), metav1.CreateOptions{})
	itest.Must(t, "create template", err)

	// The victim: a gang of the namespace, placed.
	first := startScheduler(t, sched, scheduler.Config{DomainChannels: 4})
	itest.CreateGang(t, admin, ns, "victim", 2, 2)
	itest.Poll(t, "victim placed", 60*time.Second, func(ctx context.Context) error {
		st, err := itest.ReadGang(ctx, admin, ns)
		if err == nil && (st.Bound() != 2 || len(st.Records) > 0) {
			err = fmt.Errorf("%d bound, records %v", st.Bound(), st.Records)
		}
		return err
	})
	first.stop()
	before, err := itest.ReadGang(t.Context(), admin, ns)
	itest.Must(t, "read victim", err)

	// The attackers' PodGroups, by the tenant: none can be placed on its own
	// (too few members; 8-GPU pods on 4-GPU nodes).
	groups := map[string]*schedulingv1beta1.PodGroup{}
	for _, name := range []string{"forged", "malformed", "oversized", "forward"} {
		pg, err := tenant.SchedulingV1beta1().PodGroups(ns).Create(t.Context(), itest.TemplateGroup(ns, name, 3), metav1.CreateOptions{})
		itest.Must(t, "tenant creates podgroup", err)
		groups[name] = pg
		for i := range 2 {
			p := itest.TemplatePod(ns, fmt.Sprintf("%s-%d", name, i), name)
			p.Spec.ResourceClaims[1].ResourceClaimTemplateName = ptr.To("huge")
			_, err := tenant.CoreV1().Pods(ns).Create(t.Context(), p, metav1.CreateOptions{})
			itest.Must(t, "tenant creates pod", err)
		}
	}
	// A member the tenant bound itself (anyone who may create pods may set
	// spec.nodeName), so that a record of "forward" rolls forward.
	selfBound := itest.TemplatePod(ns, "forward-bound", "forward")
	selfBound.Spec.NodeName = "b-0"
	selfBound.Spec.ResourceClaims, selfBound.Spec.Containers[0].Resources.Claims = nil, nil
	_, err = tenant.CoreV1().Pods(ns).Create(t.Context(), selfBound, metav1.CreateOptions{})
	itest.Must(t, "tenant creates a bound pod", err)
	live, err := itest.ReadGang(t.Context(), admin, ns)
	itest.Must(t, "read pods", err)
	podUID := map[string]types.UID{}
	for _, p := range live.Pods {
		podUID[p.Name] = p.UID
	}

	// The old intent annotation, forged by the tenant: the victim's claims,
	// the attacker's pods bound to a node of its choice.
	forgedClaims := victimClaims(before)
	oldIntent, _ := json.Marshal(map[string]any{"domain": "dom-a", "pods": []map[string]any{
		{"n": "forged-0", "u": podUID["forged-0"], "node": "a-3"}}, "claims": claimNames(forgedClaims)})
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{"gpufabric.dev/placement": string(oldIntent)}}})
	_, err = tenant.SchedulingV1beta1().PodGroups(ns).Patch(t.Context(), "forged", types.MergePatchType, patch, metav1.PatchOptions{})
	itest.Must(t, "tenant forges the old annotation", err)

	// Records, written with the scheduler's identity.
	forged := forgedRecord(groups["forged"], podUID, "a-3", forgedClaims)
	for _, p := range before.Pods { // the victim's pods as "members", to release their reservations
		forged["pods"] = append(forged["pods"].([]map[string]any), map[string]any{"n": p.Name, "u": p.UID, "node": p.Spec.NodeName})
	}
	writeRecord(t, sched, groups["forged"].UID, mustJSON(t, forged))
	writeRecord(t, sched, groups["malformed"].UID, `{"v":1,"podGroup":`)
	writeRecord(t, sched, groups["oversized"].UID, `{"v":1,"domain":"`+strings.Repeat("x", 950<<10)+`"}`)
	forward := forgedRecord(groups["forward"], podUID, "a-3", nil)
	forward["pods"] = append(forward["pods"].([]map[string]any), map[string]any{"n": "forward-bound", "u": podUID["forward-bound"], "node": "b-0"})
	writeRecord(t, sched, groups["forward"].UID, mustJSON(t, forward))

	recovered := make(chan struct{})
	startScheduler(t, sched, scheduler.Config{DomainChannels: 4, OnRecovered: func() { close(recovered) }})
	select {
	case <-recovered:
	case <-time.After(60 * time.Second):
		t.Fatal("scheduler did not recover")
	}
	after, err := itest.ReadGang(t.Context(), admin, ns)
	itest.Must(t, "read after recovery", err)
	if diff := cmp.Diff(claimState(before, "victim"), claimState(after, "victim")); diff != "" {
		t.Errorf("victim's claims changed by recovery (-before +after):\n%s", diff)
	}
	for _, p := range after.Pods {
		if p.Spec.NodeName != "" && !strings.HasPrefix(p.Name, "victim-") && p.Name != "forward-bound" {
			t.Errorf("pod %s bound to %s by a forged record", p.Name, p.Spec.NodeName)
		}
	}
	if len(after.Records) > 0 {
		t.Errorf("records left after recovery: %v", after.Records)
	}
	for _, e := range []struct{ group, reason, note string }{
		{"malformed", vocab.EventCommitRecordRejected, "parse record"},
		{"oversized", vocab.EventCommitRecordRejected, "over the limit"},
		{"forged", vocab.EventCommitRolledBack, "0 of 3 claims released"},
		{"forward", vocab.EventCommitRecovered, "forward-0: claim"},
	} {
		itest.Poll(t, "event "+e.reason+" on "+e.group, 20*time.Second, func(ctx context.Context) error {
			return schedFindEvent(ctx, admin, ns, e.group, e.reason, e.note)
		})
	}

	// And the scheduler goes on placing gangs.
	const next = "next"
	itest.GangNamespace(t, admin, next, 4)
	itest.CreateGang(t, admin, next, "g", 2, 2)
	itest.Poll(t, "a new gang placed after the forgeries", 60*time.Second, func(ctx context.Context) error {
		st, err := itest.ReadGang(ctx, admin, next)
		if err == nil && st.Bound() != 2 {
			err = fmt.Errorf("%d of 2 bound", st.Bound())
		}
		return err
	})
	if dup, err := itest.DevicesAllocatedTwice(t.Context(), admin); err != nil || len(dup) > 0 {
		t.Errorf("devices allocated twice: %v (%v)", dup, err)
	}
}

// victimClaims are the victim gang's claims with their allocations.
func victimClaims(st *itest.GangState) []resourceapi.ResourceClaim {
	var out []resourceapi.ResourceClaim
	for _, c := range st.Claims {
		if c.Status.Allocation != nil && strings.HasPrefix(c.Name, "victim") {
			out = append(out, c)
		}
	}
	return out
}

func claimNames(claims []resourceapi.ResourceClaim) []string {
	var out []string
	for _, c := range claims {
		out = append(out, c.Name)
	}
	return out
}

// forgedRecord is a well-formed record for pg whose two pending pods go to
// node and whose claims are others' (with their real allocation
// fingerprints, as a tenant who can read them would compute).
func forgedRecord(pg *schedulingv1beta1.PodGroup, uids map[string]types.UID, node string, claims []resourceapi.ResourceClaim) map[string]any {
	pods := []map[string]any{}
	for i := range 2 {
		name := fmt.Sprintf("%s-%d", pg.Name, i)
		pods = append(pods, map[string]any{"n": name, "u": uids[name], "node": node})
	}
	cl := []map[string]any{}
	for _, c := range claims {
		cl = append(cl, map[string]any{"n": c.Name, "u": c.UID, "pod": pg.Name + "-0", "alloc": commit.AllocationFingerprint(c.Status.Allocation)})
	}
	return map[string]any{"v": 1, "podGroup": map[string]any{"namespace": pg.Namespace, "name": pg.Name, "uid": pg.UID},
		"domain": "dom-a", "pods": pods, "claims": cl}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	raw, err := json.Marshal(v)
	itest.Must(t, "encode", err)
	return string(raw)
}

func writeRecord(t *testing.T, c kubernetes.Interface, uid types.UID, data string) {
	t.Helper()
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: itest.RecordNamespace, Name: vocab.RecordName(uid), Labels: map[string]string{vocab.LabelCommitRecord: "true"}},
		Data:       map[string]string{"record": data},
	}
	_, err := c.CoreV1().ConfigMaps(itest.RecordNamespace).Create(t.Context(), cm, metav1.CreateOptions{})
	itest.Must(t, "write record", err)
}

// claimState is each claim of the gang with its allocation and reservations.
func claimState(st *itest.GangState, prefix string) map[string]string {
	out := map[string]string{}
	for _, c := range st.Claims {
		if strings.HasPrefix(c.Name, prefix) {
			a := "none"
			if c.Status.Allocation != nil {
				a = commit.AllocationFingerprint(c.Status.Allocation)
			}
			out[c.Name] = fmt.Sprintf("alloc=%s reservedFor=%v", a, schedReservations(c.Status.ReservedFor))
		}
	}
	return out
}
