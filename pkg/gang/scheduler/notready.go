package scheduler

import (
	"context"
	"errors"
	"fmt"
	"github.com/gpufabric/gpufabric/pkg/gang/memberevents"
	"github.com/gpufabric/gpufabric/pkg/gang/vocab"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"github.com/gpufabric/gpufabric/pkg/gang/placement"
	"github.com/gpufabric/gpufabric/pkg/gang/podstate"
	"github.com/gpufabric/gpufabric/pkg/gang/queue"
)

// notReadyWriteInterval: a gang that is not ready writes its status (the
// PodGroup condition, an event, its pods' PodScheduled) at most this often.
// While a big gang's members are being created every new member makes an
// attempt; writing each time would cost writes in proportion to the
// members squared and take the API rate the gang's commit needs once it is
// complete.
const notReadyWriteInterval = time.Second

// notReadySettle: a PodGroup gang writes no waiting status while its
// members are being created, only once its member count held still this
// long. A Job or JobSet creates its pods in a burst; telling each of them
// that the gang waits for the others cost a write per member (and its
// watch event in every informer) just before the gang was complete: for a
// 512-pod gang 500 pod writes, a fifth of the scheduler's CPU for the gang
// and API time its commit then waited for (docs/benchmarks.md).
const notReadySettle = time.Second

// forget drops what the gang status remembers of a gang that is done (its
// not-ready write times, what its members were told).
func (st *gangStatus) forget(key string) {
	st.writes.Forget(key)
	st.toMembers.Forget(key)
}

// notReady says why a gang cannot be tried yet: the PodGroup condition (and
// an event when it changes) and PodScheduled on the waiting pods. A
// PodGroup's pods carry a message that does not change while the gang
// waits (the condition says what is missing), so each is written once; and
// the writes happen at most every notReadyWriteInterval per gang, the
// skipped ones at the interval's end (the gang is tried again then). A
// round of writes stops when the members the gang waited for arrive
// (membersArrived). A PodGroup gang writes nothing until its member count
// held still for notReadySettle (members still being created).
func (st *gangStatus) notReady(ctx context.Context, a *attempt, why error) error {
	a.result = resultNotReady
	st.pending.set(a.key, reasonNotReady)
	msg := strings.TrimPrefix(why.Error(), placement.ErrNotReady.Error()+": ")
	var mc *placement.MissingClaim
	if errors.As(why, &mc) && mc.Template != "" {
		_, ns, _ := queue.SplitKey(a.key)
		if _, err := st.templates.ResourceClaimTemplates(ns).Get(mc.Template); apierrors.IsNotFound(err) {
			msg = fmt.Sprintf("%s: claim %s uses resource claim template %s, which does not exist in namespace %s: create it", mc.Owner, mc.Claim, mc.Template, ns)
		}
	}
	if a.pg == nil {
		return st.setPodScheduled(ctx, a.pod, v1.PodReasonUnschedulable, "waiting: "+msg)
	}
	if ok, after := st.writes.Settled(a.key, st.groupPods(a.pg), time.Now()); !ok {
		st.queue.RetryWhileWaiting(a.key, after)
		return nil
	}
	note := memberevents.Note{EventType: v1.EventTypeNormal, Reason: vocab.ReasonWaitingForMembers, Why: vocab.ReasonWaitingForMembers, Message: msg}
	old := meta.FindStatusCondition(a.pg.Status.Conditions, vocab.ConditionInitiallyScheduled)
	if old != nil && (old.Status == metav1.ConditionTrue || old.Reason == vocab.ReasonWaitingForMembers && old.Message == msg) {
		st.markUnschedulable(ctx, a, waitingPodMessage(a.pg), note)
		return nil
	}
	if ok, after := st.writes.Due(a.key, time.Now()); !ok {
		st.queue.RetryWhileWaiting(a.key, after)
		return nil
	}
	start := time.Now()
	arrived := st.membersArrived(a)
	if st.markUnschedulableUntil(ctx, a, waitingPodMessage(a.pg), note, arrived) || arrived() {
		// The gang is tried again at once (the last member's event queued
		// it): stale writes would only delay its placement.
		klog.FromContext(ctx).V(3).Info("Waiting status cut short: the gang's members arrived", "members", len(a.members), "duration", time.Since(start))
		return nil
	}
	st.report.Event(a.pg, v1.EventTypeNormal, vocab.ReasonWaitingForMembers, "Scheduling", msg)
	err := st.conditions.SetInitiallyScheduled(ctx, a.pg, metav1.ConditionFalse, vocab.ReasonWaitingForMembers, msg)
	klog.FromContext(ctx).V(3).Info("Wrote waiting status", "members", len(a.members), "duration", time.Since(start))
	return err
}

// membersArrived returns whether a PodGroup gang that had fewer pending
// members than its minCount when the attempt began has that many now (the
// informers' view). For a gang that had them already (it waits for a
// claim) it always says no: its status is written whole.
//
// Rule: a gang's waiting-status writes (up to one per member, run in the
// worker) stop as soon as its last member arrives, so they never hold up
// the attempt that places it by more than the writes already started.
// Before, a 512-pod gang's round of writes begun while its members were
// being created went on for up to 1.2 s after the last one existed
// (docs/benchmarks.md, bench-peer).
func (st *gangStatus) membersArrived(a *attempt) func() bool {
	want := 1
	if gp := a.pg.Spec.SchedulingPolicy.Gang; gp != nil {
		want = int(gp.MinCount)
	}
	if len(a.members) >= want {
		return func() bool { return false }
	}
	key := a.pg.Namespace + "/" + a.pg.Name
	return func() bool {
		objs, err := st.gangs.pods.ByIndex(podGroupIndex, key)
		if err != nil {
			return false
		}
		n := 0
		for _, o := range objs {
			if p, ok := o.(*v1.Pod); ok && podstate.Pending(p) {
				n++
			}
		}
		return n >= want
	}
}

// waitingPodMessage is the PodScheduled message of a waiting member: the
// same while the gang waits, so a member is written once.
func waitingPodMessage(pg *schedulingv1beta1.PodGroup) string {
	return fmt.Sprintf("waiting for the gang's members or claims: PodGroup %s/%s's condition %s says what is missing",
		pg.Namespace, pg.Name, vocab.ConditionInitiallyScheduled)
}

// groupPods counts a PodGroup's pods in the informers, whatever their
// state: the member count whose changes notReadySettle waits out.
func (st *gangStatus) groupPods(pg *schedulingv1beta1.PodGroup) int {
	objs, err := st.gangs.pods.ByIndex(podGroupIndex, pg.Namespace+"/"+pg.Name)
	if err != nil {
		return 0
	}
	return len(objs)
}

// membersArriving is the not-ready attempt of a PodGroup whose members are
// still being created, made cheap: with fewer pods than its minCount, none
// bound or gated, and a pod count that has not held still for
// notReadySettle, the gang can be neither placed nor told anything, so it
// is not built (members, claims: work in proportion to its pods, at each
// new member, so in proportion to their square over a burst) and is tried
// again when the count settles or a member arrives. It reports whether it
// handled the attempt.
func (st *gangStatus) membersArriving(ctx context.Context, key string, pg *schedulingv1beta1.PodGroup, cycle uint64) bool {
	begin := time.Now()
	gp := pg.Spec.SchedulingPolicy.Gang
	if gp == nil {
		return false
	}
	objs, err := st.gangs.pods.ByIndex(podGroupIndex, pg.Namespace+"/"+pg.Name)
	if err != nil || len(objs) >= int(gp.MinCount) {
		return false
	}
	for _, o := range objs {
		if p, ok := o.(*v1.Pod); !ok || p.Spec.NodeName != "" || len(p.Spec.SchedulingGates) > 0 {
			return false
		}
	}
	ok, after := st.writes.Settled(key, len(objs), time.Now())
	if ok {
		return false
	}
	st.pending.set(key, reasonNotReady)
	st.queue.Wait(key, pg.Namespace, cycle)
	st.queue.RetryWhileWaiting(key, after)
	st.metrics.ObserveAttempt(resultNotReady, time.Since(begin).Seconds())
	klog.FromContext(ctx).V(3).Info("Gang not ready", "gang", key, "reason", "members arriving", "pods", len(objs), "minCount", gp.MinCount)
	return true
}
