package scheduler

import (
	"context"
	"fmt"

	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/util/retry"
)

// Event reasons.
const (
	EventFailedScheduling = "FailedScheduling"
	EventScheduled        = "Scheduled"
)

// maxEventNote is the API's limit for an event's note.
const maxEventNote = 1024

// setCondition sets PodGroupInitiallyScheduled. Rules: an unchanged
// condition is not rewritten; once True it never goes back to False (the
// API calls it terminal).
func (s *Scheduler) setCondition(ctx context.Context, pg *schedulingv1beta1.PodGroup, status metav1.ConditionStatus, reason, message string) error {
	cur := pg
	first := true
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if !first {
			var err error
			if cur, err = s.cfg.Client.SchedulingV1beta1().PodGroups(pg.Namespace).Get(ctx, pg.Name, metav1.GetOptions{}); err != nil {
				return err
			}
		}
		first = false
		old := meta.FindStatusCondition(cur.Status.Conditions, schedulingv1beta1.PodGroupInitiallyScheduled)
		if old != nil && (old.Status == metav1.ConditionTrue && status != metav1.ConditionTrue ||
			old.Status == status && old.Reason == reason && old.Message == message) {
			return nil
		}
		if err := s.step(StepCondition, pg.Namespace+"/"+pg.Name); err != nil {
			return err
		}
		next := cur.DeepCopy()
		meta.SetStatusCondition(&next.Status.Conditions, metav1.Condition{
			Type: schedulingv1beta1.PodGroupInitiallyScheduled, Status: status, Reason: reason,
			Message: message, ObservedGeneration: next.Generation,
		})
		_, err := s.cfg.Client.SchedulingV1beta1().PodGroups(pg.Namespace).UpdateStatus(ctx, next, metav1.UpdateOptions{FieldManager: schedulerName})
		return err
	})
	if err != nil {
		return fmt.Errorf("set condition on podgroup %s/%s: %w", pg.Namespace, pg.Name, err)
	}
	return nil
}

// event records an event about obj (a PodGroup or a Pod).
func (s *Scheduler) event(obj runtime.Object, eventType, reason, action, note string) {
	if len(note) > maxEventNote {
		note = note[:maxEventNote-3] + "..."
	}
	s.recorder.Eventf(obj, nil, eventType, reason, action, "%s", note)
}
