package scheduler

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"

	v1 "k8s.io/api/core/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpufabric/gpufabric/pkg/gang/podstate"
	"github.com/gpufabric/gpufabric/pkg/gang/replace"
	"github.com/gpufabric/gpufabric/pkg/gang/vocab"
)

// A gang's life after it was placed, and the status of pods the scheduler
// will not place.
const (
	// gatedMessage is kube-scheduler's message for a gated pod.
	gatedMessage = "Scheduling is blocked due to non-empty scheduling gates"
)

// peaks remembers, per PodGroup, the most members seen running in this
// term: a gang whose deleted pods are not recreated still counts them.
// Safe for concurrent use.
type peaks struct {
	mu sync.Mutex
	m  map[types.UID]int
}

func (p *peaks) observe(uid types.UID, running int) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.m == nil {
		p.m = map[types.UID]int{}
	}
	p.m[uid] = max(p.m[uid], running)
	return p.m[uid]
}

// checkMembers keeps vocab.ConditionMembersLost of a placed PodGroup up to date.
// Expected members: the most of minCount, the members that exist (running,
// waiting, gated: a Job recreates lost pods), and the most seen running in
// this term. A running member is bound, not finished, not terminating, on a
// node that exists.
// The replace room's Turn (replace in place) has the last word on it.
func (st *gangStatus) checkMembers(ctx context.Context, key string, pg *schedulingv1beta1.PodGroup, ms *memberSet) (replace.Outcome, error) {
	placed := meta.FindStatusCondition(pg.Status.Conditions, vocab.ConditionInitiallyScheduled)
	if placed == nil || placed.Status != metav1.ConditionTrue {
		return replace.Outcome{}, nil
	}
	running := len(ms.running)
	minCount := 1
	if g := pg.Spec.SchedulingPolicy.Gang; g != nil {
		minCount = int(g.MinCount)
	}
	peak := st.peaks.observe(pg.UID, running)
	expected := max(minCount, running+len(ms.pending)+len(ms.gated)+len(ms.lost), peak)
	cond := metav1.Condition{Type: vocab.ConditionMembersLost, Status: metav1.ConditionFalse, Reason: vocab.ReasonAllMembersRunning,
		Message: fmt.Sprintf("all %d members run", running)}
	if running < expected {
		cond = metav1.Condition{Type: vocab.ConditionMembersLost, Status: metav1.ConditionTrue, Reason: vocab.ReasonMembersLost,
			Message: lostMessage(running, expected, minCount, ms)}
	}
	out, err := st.replacer.Turn(ctx, replace.Turn{Key: key, PodGroup: pg, Losses: ms.losses, Running: ms.running,
		Pending: append(slices.Clip(ms.pending), ms.gated...), Expected: max(minCount, peak), Cond: cond, Leaf: ms.leaf, WholeAbove: ms.wholeAbove})
	if err != nil {
		return out, err
	}
	cond = out.Cond
	old := meta.FindStatusCondition(pg.Status.Conditions, vocab.ConditionMembersLost)
	if old == nil && cond.Status == metav1.ConditionFalse {
		return out, nil // never lost any
	}
	if old != nil && old.Status == cond.Status && old.Reason == cond.Reason && old.Message == cond.Message {
		return out, nil
	}
	if err := st.conditions.SetCondition(ctx, pg, cond); err != nil {
		return out, err
	}
	if (old == nil || old.Status != cond.Status) && !out.Echo {
		typ, reason := v1.EventTypeWarning, vocab.EventMembersLost
		if cond.Status == metav1.ConditionFalse {
			typ, reason = v1.EventTypeNormal, vocab.EventMembersRestored
		}
		st.report.Event(pg, typ, reason, "Monitoring", cond.Message)
	}
	return out, nil
}

// failed handles a PodGroup that failed (replace.Failed): its running
// members are evicted, its waiting ones told, nothing of it is placed.
func (st *gangStatus) failed(ctx context.Context, pg *schedulingv1beta1.PodGroup) (bool, error) {
	if !replace.Failed(pg) {
		return false, nil
	}
	ms, err := st.gangs.members(pg)
	if err != nil {
		return true, err
	}
	st.setPods(ctx, append(ms.pending, ms.gated...), vocab.ReasonNoReplacement,
		fmt.Sprintf("pod group %s failed (condition %s): nothing of it is placed again until it is recreated", pg.Name, vocab.ConditionFailed))
	return true, st.replacer.EvictFailed(ctx, ms.running)
}

func lostMessage(running, expected, minCount int, ms *memberSet) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d of %d members remain running (minCount %d)", running, expected, minCount)
	if len(ms.lost) > 0 {
		fmt.Fprintf(&b, "; lost: %s", strings.Join(ms.lost[:min(len(ms.lost), 8)], ", "))
		if len(ms.lost) > 8 {
			fmt.Fprintf(&b, " and %d more", len(ms.lost)-8)
		}
	}
	if gone := expected - running - len(ms.pending) - len(ms.gated) - len(ms.lost); gone > 0 {
		fmt.Fprintf(&b, "; %d deleted", gone)
	}
	if len(ms.pending) > 0 {
		fmt.Fprintf(&b, "; %d waiting to rejoin the gang's domain", len(ms.pending))
	}
	if running < minCount {
		b.WriteString("; below minCount")
	}
	return b.String()
}

// podGroupMissing marks the waiting pods of a PodGroup that does not exist.
func (st *gangStatus) podGroupMissing(ctx context.Context, ns, name string) {
	objs, err := st.gangs.pods.ByIndex(podGroupIndex, ns+"/"+name)
	if err != nil {
		return
	}
	var pods []*v1.Pod
	for _, o := range objs {
		if p, ok := o.(*v1.Pod); ok && podstate.Ours(p) && p.Spec.NodeName == "" && p.DeletionTimestamp == nil {
			pods = append(pods, p)
		}
	}
	st.setPods(ctx, pods, vocab.ReasonPodGroupNotFound,
		fmt.Sprintf("pod group %s does not exist (not created yet, or deleted): the pod waits for it", name))
}

// podGroupDeleting marks the waiting pods of a PodGroup being deleted.
func (st *gangStatus) podGroupDeleting(ctx context.Context, pg *schedulingv1beta1.PodGroup) {
	ms, err := st.gangs.members(pg)
	if err != nil {
		return
	}
	st.setPods(ctx, append(ms.pending, ms.gated...), vocab.ReasonPodGroupNotFound,
		fmt.Sprintf("pod group %s is being deleted: the pod will not be placed", pg.Name))
}

// markGated says why gated pods wait, as kube-scheduler does.
func (st *gangStatus) markGated(ctx context.Context, pods []*v1.Pod) {
	st.setPods(ctx, pods, v1.PodReasonSchedulingGated, gatedMessage)
}
