package scheduler

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	v1 "k8s.io/api/core/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/klog/v2"

	"github.com/gpufabric/gpufabric/pkg/gang/placement"
)

// attempt is one scheduling attempt of a gang.
type attempt struct {
	key string
	// cycle is the queue's move counter when the attempt started.
	cycle uint64
	pg    *schedulingv1beta1.PodGroup // nil for a gang of one
	pod   *v1.Pod                     // the pod of a gang of one
}

// about is the object events and conditions are about.
func (a *attempt) about() runtime.Object {
	if a.pg != nil {
		return a.pg
	}
	return a.pod
}

// scheduleKey runs one attempt for a gang key. Only an error wrapping
// ErrAborted stops the worker.
func (s *Scheduler) scheduleKey(ctx context.Context, key string) error {
	cycle := s.queue.cycle()
	if s.assumed.waiting(key, s.visible) {
		// Committed; the informers do not show it all yet. Look again soon
		// in case members were added meanwhile.
		s.queue.retryAfter(key, time.Second)
		return nil
	}
	isGroup, ns, name := splitKey(key)
	if !isGroup {
		pod, err := s.pods.Pods(ns).Get(name)
		if apierrors.IsNotFound(err) || err == nil && !pending(pod) {
			s.queue.forget(key)
			return nil
		}
		if err != nil {
			return fmt.Errorf("get pod: %w", err)
		}
		g, err := placement.NewPodGang(pod, s.getClaim)
		return s.place(ctx, &attempt{key: key, cycle: cycle, pod: pod}, g, err)
	}
	pg, err := s.podGroups.PodGroups(ns).Get(name)
	if apierrors.IsNotFound(err) {
		s.queue.forget(key)
		return nil
	}
	if err != nil {
		return fmt.Errorf("get podgroup: %w", err)
	}
	if _, ok := pg.Annotations[AnnotationPlacement]; ok {
		// A commit of this gang is half done (another leader, or a failed
		// undo): finish or roll it back first; the annotation's removal
		// queues the gang again.
		return s.recoverGroupByName(ctx, ns, name)
	}
	members, anyBound, err := s.members(pg)
	if err != nil {
		return err
	}
	if len(members) == 0 {
		s.queue.forget(key)
		return nil
	}
	group := pg
	if anyBound {
		// Late members join the placed gang where its shared claims pin them.
		group = pg.DeepCopy()
		group.Spec.SchedulingPolicy.Gang = nil
	}
	g, err := placement.NewGang(group, members, s.getClaim)
	return s.place(ctx, &attempt{key: key, cycle: cycle, pg: pg}, g, err)
}

// members returns the pending pods of a PodGroup and whether any of its pods
// is bound already.
func (s *Scheduler) members(pg *schedulingv1beta1.PodGroup) ([]*v1.Pod, bool, error) {
	objs, err := s.inf.pods.GetIndexer().ByIndex(podGroupIndex, pg.Namespace+"/"+pg.Name)
	if err != nil {
		return nil, false, fmt.Errorf("list members: %w", err)
	}
	var out []*v1.Pod
	anyBound := false
	for _, o := range objs {
		p, ok := o.(*v1.Pod)
		if !ok || !ours(p) || p.DeletionTimestamp != nil || terminated(p) {
			continue
		}
		if p.Spec.NodeName != "" {
			anyBound = true
			continue
		}
		out = append(out, p)
	}
	return out, anyBound, nil
}

// place places a built gang and commits or reports the result.
func (s *Scheduler) place(ctx context.Context, a *attempt, g *placement.Gang, buildErr error) error {
	logger := klog.LoggerWithValues(klog.FromContext(ctx), "gang", a.key)
	ctx = klog.NewContext(ctx, logger)
	if errors.Is(buildErr, placement.ErrNotReady) {
		logger.V(3).Info("Gang not ready", "reason", buildErr.Error())
		_, ns, _ := splitKey(a.key)
		s.queue.wait(a.key, ns, a.cycle)
		return nil
	}
	if buildErr != nil {
		return s.refuse(ctx, a, ReasonSchedulerError, schedulingv1beta1.PodGroupReasonSchedulerError, buildErr.Error())
	}
	start := time.Now()
	snap, err := s.snapshot(ctx)
	var d *placement.Decision
	var u *placement.Unschedulable
	if err == nil {
		d, u, err = snap.Place(ctx, g)
	}
	s.cfg.Metrics.observePlacement(time.Since(start).Seconds())
	switch {
	case err != nil:
		return s.refuse(ctx, a, ReasonSchedulerError, schedulingv1beta1.PodGroupReasonSchedulerError, err.Error())
	case u != nil:
		return s.refuse(ctx, a, ReasonUnschedulable, schedulingv1beta1.PodGroupReasonUnschedulable, u.Message)
	}
	logger.V(2).Info("Placed gang", "domain", d.Domain, "key", d.TopologyKey, "pods", len(d.Pods), "claims", len(d.Claims), "duration", time.Since(start))
	err = s.commit(ctx, a.pg, g, d)
	switch {
	case errors.Is(err, ErrAborted):
		return err
	case errors.Is(err, errConflict):
		logger.V(2).Info("Commit lost a race, retrying on a fresh snapshot", "err", err)
		s.cfg.Metrics.gangRefused(ReasonConflict)
		s.queue.retryAfter(a.key, time.Duration(50+rand.IntN(100))*time.Millisecond)
		return nil
	case err != nil:
		s.cfg.Metrics.gangRefused(ReasonCommitError)
		s.event(a.about(), v1.EventTypeWarning, EventFailedScheduling, "Binding", "commit failed: "+err.Error())
		s.queue.park(a.key, a.cycle)
		return err
	}
	s.assumed.add(a.key, g, d)
	s.queue.forget(a.key)
	s.cfg.Metrics.gangPlaced()
	s.event(a.about(), v1.EventTypeNormal, EventScheduled, "Binding",
		fmt.Sprintf("placed %d pods in %s %s", len(d.Pods), d.TopologyKey, d.Domain))
	return nil
}

// refuse reports a gang that was not placed: metric, condition (PodGroups),
// event, and backoff.
func (s *Scheduler) refuse(ctx context.Context, a *attempt, metricReason, conditionReason, message string) error {
	s.cfg.Metrics.gangRefused(metricReason)
	backoff := s.queue.park(a.key, a.cycle)
	klog.FromContext(ctx).V(2).Info("Gang not placed", "reason", conditionReason, "message", message, "backoff", backoff)
	s.event(a.about(), v1.EventTypeWarning, EventFailedScheduling, "Scheduling", message)
	s.markUnschedulable(ctx, a, message)
	if a.pg == nil {
		return nil
	}
	return s.setCondition(ctx, a.pg, metav1.ConditionFalse, conditionReason, message)
}
