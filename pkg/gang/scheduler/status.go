package scheduler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	resourcelisters "k8s.io/client-go/listers/resource/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"

	"github.com/gpufabric/gpufabric/pkg/gang/commit"
	"github.com/gpufabric/gpufabric/pkg/gang/gate"
	"github.com/gpufabric/gpufabric/pkg/gang/memberevents"
	"github.com/gpufabric/gpufabric/pkg/gang/placement"
	"github.com/gpufabric/gpufabric/pkg/gang/queue"
	"github.com/gpufabric/gpufabric/pkg/gang/replace"
	"github.com/gpufabric/gpufabric/pkg/gang/report"
	"github.com/gpufabric/gpufabric/pkg/gang/vocab"
)

// conditions writes PodGroup conditions, each write past the gate (re-read
// on conflict). The loop and the commit and evict rooms write through it.
type conditions struct {
	client kubernetes.Interface
	gate   *gate.Gate
}

var _ commit.Conditions = (*conditions)(nil)

// SetInitiallyScheduled sets PodGroupInitiallyScheduled. Rules: an
// unchanged condition is not rewritten; once True it never goes back to
// False (the API calls it terminal); the message is cut to
// report.MaxMessage.
func (c *conditions) SetInitiallyScheduled(ctx context.Context, pg *schedulingv1beta1.PodGroup, status metav1.ConditionStatus, reason, message string) error {
	message = report.Message(message)
	cur := pg
	first := true
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if !first {
			var err error
			if cur, err = c.client.SchedulingV1beta1().PodGroups(pg.Namespace).Get(ctx, pg.Name, metav1.GetOptions{}); err != nil {
				return err
			}
		}
		first = false
		old := meta.FindStatusCondition(cur.Status.Conditions, vocab.ConditionInitiallyScheduled)
		if old != nil && (old.Status == metav1.ConditionTrue && status != metav1.ConditionTrue ||
			old.Status == status && old.Reason == reason && old.Message == message) {
			return nil
		}
		if err := c.gate.Check(gate.StepCondition, pg.Namespace+"/"+pg.Name); err != nil {
			return err
		}
		next := cur.DeepCopy()
		meta.SetStatusCondition(&next.Status.Conditions, metav1.Condition{
			Type: vocab.ConditionInitiallyScheduled, Status: status, Reason: reason,
			Message: message, ObservedGeneration: next.Generation,
		})
		_, err := c.client.SchedulingV1beta1().PodGroups(pg.Namespace).UpdateStatus(ctx, next, metav1.UpdateOptions{FieldManager: schedulerName})
		return err
	})
	if err != nil {
		return fmt.Errorf("set condition on podgroup %s/%s: %w", pg.Namespace, pg.Name, err)
	}
	return nil
}

// SetCondition sets one condition on a PodGroup, its message cut to
// report.MaxMessage; an unchanged condition is not rewritten.
func (c *conditions) SetCondition(ctx context.Context, pg *schedulingv1beta1.PodGroup, cond metav1.Condition) error {
	cond.Message = report.Message(cond.Message)
	client := c.client.SchedulingV1beta1().PodGroups(pg.Namespace)
	cur := pg
	first := true
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if !first {
			var err error
			if cur, err = client.Get(ctx, pg.Name, metav1.GetOptions{}); err != nil {
				return err
			}
		}
		first = false
		if old := meta.FindStatusCondition(cur.Status.Conditions, cond.Type); old != nil &&
			old.Status == cond.Status && old.Reason == cond.Reason && old.Message == cond.Message {
			return nil
		}
		if err := c.gate.Check(gate.StepCondition, pg.Namespace+"/"+pg.Name); err != nil {
			return err
		}
		next := cur.DeepCopy()
		cond.ObservedGeneration = next.Generation
		meta.SetStatusCondition(&next.Status.Conditions, cond)
		_, err := client.UpdateStatus(ctx, next, metav1.UpdateOptions{FieldManager: schedulerName})
		return err
	})
	if err != nil {
		return fmt.Errorf("set %s on podgroup %s/%s: %w", cond.Type, pg.Namespace, pg.Name, err)
	}
	return nil
}

// gangStatus tells users why gangs wait or run short: PodGroup
// conditions (through conditions), PodScheduled on pods, events, the
// members-lost condition of placed gangs, and the status of gangs that
// are not ready yet (notready.go), which it writes at most so often.
type gangStatus struct {
	client      kubernetes.Interface
	gate        *gate.Gate
	conditions  *conditions
	report      *report.Reporter
	metrics     *Metrics
	parallelism int
	templates   resourcelisters.ResourceClaimTemplateLister
	gangs       *gangPods
	queue       waitQueue
	// replacer replaces lost members in place (pkg/gang/replace).
	replacer *replace.Replacer
	// pending: why each gang waits, shared with the loop.
	pending *pendingSet
	peaks   peaks
	// writes throttles the status writes of gangs not ready yet.
	writes report.Throttle
	// toMembers tells waiting members why their gang waits (events).
	toMembers *memberevents.Events
}

// waitQueue is what gangStatus needs of the queue: a gang that is not
// ready waits, and is tried again later.
type waitQueue interface {
	Wait(key, namespace string, cycle uint64)
	RetryWhileWaiting(key string, d time.Duration)
}

var _ waitQueue = queue.Interface(nil)

// markUnschedulable sets PodScheduled=False (reason Unschedulable) with
// message on each waiting pod of the attempt, as kube-scheduler does, so
// `kubectl get pods` and `describe` say why. A pod whose condition already
// says the same is not rewritten. Best effort: failures are logged, the
// PodGroup condition and the event carry the same message. The members of
// a PodGroup also get note's event (memberevents.Events: deduplicated, bounded).
func (st *gangStatus) markUnschedulable(ctx context.Context, a *attempt, message string, note memberevents.Note) {
	st.markUnschedulableUntil(ctx, a, message, note, nil)
}

// errStopWrites ends markUnschedulableUntil's writes early.
var errStopWrites = errors.New("stop writing")

// markUnschedulableUntil is markUnschedulable that starts no further write
// once stop (when not nil) reports true, checked before each pod; it
// reports whether it stopped so (then it records no member event). Writes
// already started complete.
func (st *gangStatus) markUnschedulableUntil(ctx context.Context, a *attempt, message string, note memberevents.Note, stop func() bool) bool {
	pods := []*v1.Pod{a.pod}
	if a.pg != nil {
		ms, err := st.gangs.members(a.pg)
		if err != nil {
			klog.FromContext(ctx).Error(err, "Listing gang members for their PodScheduled condition")
			return false
		}
		pods = ms.pending
		message = fmt.Sprintf("gang %s/%s: %s", a.pg.Namespace, a.pg.Name, message)
	}
	err := commit.Parallel(ctx, st.parallelism, len(pods), func(ctx context.Context, i int) error {
		if stop != nil && stop() {
			return errStopWrites
		}
		return st.setPodUnschedulable(ctx, pods[i], message)
	})
	if errors.Is(err, errStopWrites) {
		return true
	}
	if err != nil {
		klog.FromContext(ctx).Error(err, "Setting PodScheduled=False on waiting pods")
	}
	st.toMembers.Tell(a.key, a.pg, note, pods)
	return false
}

func (st *gangStatus) setPodUnschedulable(ctx context.Context, pod *v1.Pod, message string) error {
	return st.setPodScheduled(ctx, pod, v1.PodReasonUnschedulable, message)
}

// setPodScheduled sets PodScheduled=False with reason and message (cut to
// report.MaxMessage) on an unbound pod, unless it already says so.
func (st *gangStatus) setPodScheduled(ctx context.Context, pod *v1.Pod, reason, message string) error {
	message = report.Message(message)
	if pod == nil || pod.Spec.NodeName != "" {
		return nil
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == v1.PodScheduled && c.Status == v1.ConditionFalse && c.Reason == reason && c.Message == message {
			return nil
		}
	}
	if err := st.gate.Fenced(); err != nil {
		return fmt.Errorf("%w: before setting PodScheduled on %s/%s: %w", gate.ErrFenced, pod.Namespace, pod.Name, err)
	}
	patch, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": []v1.PodCondition{{
		Type: v1.PodScheduled, Status: v1.ConditionFalse, Reason: reason,
		Message: message, LastTransitionTime: metav1.Now(),
	}}}})
	if err != nil {
		return fmt.Errorf("encode pod condition: %w", err)
	}
	_, err = st.client.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.StrategicMergePatchType, patch,
		metav1.PatchOptions{FieldManager: schedulerName}, "status")
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("set PodScheduled on pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	return nil
}

// setPods sets PodScheduled=False on pods in parallel, best effort.
func (st *gangStatus) setPods(ctx context.Context, pods []*v1.Pod, reason, message string) {
	err := commit.Parallel(ctx, st.parallelism, len(pods), func(ctx context.Context, i int) error {
		return st.setPodScheduled(ctx, pods[i], reason, message)
	})
	if err != nil {
		klog.FromContext(ctx).Error(err, "Setting PodScheduled=False", "reason", reason)
	}
}

// markWaiting sets PodScheduled=False on the members a partial placement
// left out.
func (st *gangStatus) markWaiting(ctx context.Context, a *attempt, g *placement.Gang, d *placement.Decision) {
	placed := map[types.UID]bool{}
	for _, pp := range d.Pods {
		placed[pp.UID] = true
	}
	msg := fmt.Sprintf("gang %s: %s", g.Key(), commit.PlacedMessage(g, d))
	var left []*v1.Pod
	for _, m := range g.Members {
		if !placed[m.Pod.UID] {
			left = append(left, m.Pod)
		}
	}
	err := commit.Parallel(ctx, st.parallelism, len(left), func(ctx context.Context, i int) error {
		return st.setPodUnschedulable(ctx, left[i], msg)
	})
	if err != nil {
		klog.FromContext(ctx).Error(err, "Setting PodScheduled=False on members left for later")
	}
}
