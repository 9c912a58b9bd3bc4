package soak

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/gpufabric/gpufabric/pkg/gang/vocab"
	"github.com/gpufabric/gpufabric/test/integration/itest"
)

// watch checks the invariants every second (and notes the gangs that
// recovered from node faults).
func (s *soak) watch(ctx context.Context) {
	for ctx.Err() == nil {
		s.check(ctx)
		if s.nf != nil {
			s.nf.observe(ctx, false)
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

// check reads every soak namespace and reports violations: a device
// allocated twice at once; a gang partly bound, or with allocated claims
// and no pod bound, for longer than soakSettle.
func (s *soak) check(ctx context.Context) {
	if dup, err := itest.DevicesAllocatedTwice(ctx, s.admin); err == nil && len(dup) > 0 {
		s.violation("devices allocated twice: %v", dup)
	}
	now := time.Now()
	current := map[string]bool{}
	for _, ns := range []string{"soak-2", "soak-4", "soak-8", adversaryNS} {
		st, err := itest.ReadGang(ctx, s.admin, ns)
		if err != nil {
			continue // a refused read (rate limit, no such namespace) is checked next time
		}
		for _, bad := range transientStates(st) {
			key := ns + "/" + bad
			current[key] = true
			s.mu.Lock()
			first, ok := s.seen[key]
			if !ok {
				s.seen[key] = now
			}
			s.mu.Unlock()
			if ok && now.Sub(first) > soakSettle {
				s.violation("%s for %s", key, now.Sub(first).Round(time.Second))
				s.mu.Lock()
				s.seen[key] = now // report again only after another settle time
				s.mu.Unlock()
			}
		}
	}
	s.mu.Lock()
	for key := range s.seen {
		if !current[key] {
			delete(s.seen, key)
		}
	}
	s.mu.Unlock()
}

// transientStates names the gangs of a namespace that are partly bound, or
// hold allocated claims with no member bound.
func transientStates(st *itest.GangState) []string {
	type count struct{ pods, bound int }
	groups := map[string]*count{}
	for _, p := range st.Pods {
		if p.DeletionTimestamp != nil || p.Status.Phase == corev1.PodFailed || p.Spec.SchedulingGroup == nil {
			continue
		}
		g := ptr.Deref(p.Spec.SchedulingGroup.PodGroupName, "")
		if groups[g] == nil {
			groups[g] = &count{}
		}
		groups[g].pods++
		if p.Spec.NodeName != "" {
			groups[g].bound++
		}
	}
	var out []string
	for g, c := range groups {
		if c.bound > 0 && c.bound < c.pods {
			out = append(out, fmt.Sprintf("%s partly bound (%d of %d)", g, c.bound, c.pods))
		}
	}
	for _, cl := range st.Claims {
		if cl.Status.Allocation == nil || cl.DeletionTimestamp != nil {
			continue
		}
		for _, r := range cl.Status.ReservedFor {
			g := r.Name
			if r.Resource == "pods" {
				g, _, _ = strings.Cut(r.Name, "-")
			}
			if c := groups[g]; c != nil && c.bound == 0 {
				out = append(out, fmt.Sprintf("%s holds claim %s with no pod bound", g, cl.Name))
			}
		}
	}
	return out
}

// settled: every gang still there is fully bound (its commit record gone),
// or refused with the Unschedulable condition and a message.
func (s *soak) settled(ctx context.Context) error {
	for _, g := range []int{2, 4, 8} {
		ns := fmt.Sprintf("soak-%d", g)
		st, err := itest.ReadGang(ctx, s.admin, ns)
		if err != nil {
			return err
		}
		if len(st.Records) > 0 {
			return fmt.Errorf("%s: commit records left %v", ns, st.Records)
		}
		for _, pg := range st.Groups {
			if pg.DeletionTimestamp != nil {
				continue
			}
			if err := placedOrRefused(st, &pg); err != nil {
				return fmt.Errorf("%s/%s: %w", ns, pg.Name, err)
			}
		}
	}
	return nil
}

func placedOrRefused(st *itest.GangState, pg *schedulingv1beta1.PodGroup) error {
	pods, bound := 0, 0
	for _, p := range st.Pods {
		// Terminating and failed pods (left by node faults) are no members.
		if p.DeletionTimestamp != nil || p.Status.Phase == corev1.PodFailed {
			continue
		}
		if p.Spec.SchedulingGroup != nil && ptr.Deref(p.Spec.SchedulingGroup.PodGroupName, "") == pg.Name {
			pods++
			if p.Spec.NodeName != "" {
				bound++
			}
		}
	}
	c := meta.FindStatusCondition(pg.Status.Conditions, schedulingv1beta1.PodGroupInitiallyScheduled)
	switch {
	case pods > 0 && bound == pods:
		return nil
	case bound == 0 && c != nil && c.Status == metav1.ConditionFalse && c.Reason == schedulingv1beta1.PodGroupReasonUnschedulable && c.Message != "":
		return nil
	}
	// A gang a fault hit whose policy is Fail ends failed, with a reason;
	// one restarting whole waits for room, saying so (the calm deletes
	// no gang: the room may not come).
	if f := meta.FindStatusCondition(pg.Status.Conditions, vocab.ConditionFailed); f != nil && f.Status == metav1.ConditionTrue && f.Message != "" {
		return nil
	}
	if d := meta.FindStatusCondition(pg.Status.Conditions, schedulingv1beta1.DisruptionTarget); bound == 0 && d != nil &&
		d.Status == metav1.ConditionTrue && d.Reason == vocab.ReasonReplacingMembers && d.Message != "" {
		return nil
	}
	return fmt.Errorf("%d of %d bound, condition %+v", bound, pods, c)
}
