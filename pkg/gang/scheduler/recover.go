package scheduler

import (
	"context"
	"fmt"
	"slices"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"
)

// recoverAll finishes or rolls back every half-done commit. It runs before
// the first scheduling attempt of a leadership term, on synced informers;
// every decision is re-checked with a live read before it writes.
//
// Rules: a PodGroup with an intent annotation is finished when any member
// it names is bound, else rolled back (recoverGroup). Then every claim
// reserved for an unbound pod of ours loses that reservation, and its
// allocation when no reservation is left (a gang of one killed before its
// binding).
func (s *Scheduler) recoverAll(ctx context.Context) error {
	pgs, err := s.podGroups.List(labels.Everything())
	if err != nil {
		return fmt.Errorf("list podgroups: %w", err)
	}
	for _, pg := range pgs {
		if _, ok := pg.Annotations[AnnotationPlacement]; !ok {
			continue
		}
		if err := s.recoverGroupByName(ctx, pg.Namespace, pg.Name); err != nil {
			return err
		}
	}
	return s.releaseUnboundPods(ctx)
}

// recoverGroupByName reads the PodGroup live and recovers it.
func (s *Scheduler) recoverGroupByName(ctx context.Context, namespace, name string) error {
	pg, err := s.cfg.Client.SchedulingV1beta1().PodGroups(namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil // kube-controller-manager drops reservations of deleted PodGroups
	}
	if err != nil {
		return fmt.Errorf("get podgroup %s/%s: %w", namespace, name, err)
	}
	return s.recoverGroup(ctx, pg)
}

// recoverGroup finishes the PodGroup's commit when a member is bound, rolls
// it back otherwise, and removes the intent.
func (s *Scheduler) recoverGroup(ctx context.Context, pg *schedulingv1beta1.PodGroup) error {
	logger := klog.FromContext(ctx)
	in, ok, err := parseIntent(pg)
	if !ok {
		return nil
	}
	if err != nil {
		logger.Error(err, "Dropping unreadable commit intent", "podgroup", klog.KObj(pg))
		_, err = s.patchIntent(ctx, pg, nil)
		return err
	}
	pods, anyBound, err := s.livePods(ctx, pg.Namespace, in)
	if err != nil {
		return err
	}
	if anyBound {
		logger.Info("Finishing half-done commit", "podgroup", klog.KObj(pg), "domain", in.Domain)
		if err := s.finishGroup(ctx, pg, in, pods); err != nil {
			return err
		}
	} else {
		logger.Info("Rolling back half-done commit", "podgroup", klog.KObj(pg), "domain", in.Domain)
		consumers := map[types.UID]bool{pg.UID: true}
		for _, p := range in.Pods {
			consumers[p.UID] = true
		}
		err := parallel(ctx, s.cfg.CommitParallelism, len(in.Claims), func(ctx context.Context, i int) error {
			return s.releaseClaim(ctx, pg.Namespace, in.Claims[i], consumers)
		})
		if err != nil {
			return err
		}
	}
	_, err = s.patchIntent(ctx, pg, nil)
	return err
}

// livePods reads the intent's pods (in parallel); missing or replaced pods
// are nil.
func (s *Scheduler) livePods(ctx context.Context, namespace string, in intent) ([]*v1.Pod, bool, error) {
	out := make([]*v1.Pod, len(in.Pods))
	err := parallel(ctx, s.cfg.CommitParallelism, len(in.Pods), func(ctx context.Context, i int) error {
		ip := in.Pods[i]
		p, err := s.cfg.Client.CoreV1().Pods(namespace).Get(ctx, ip.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("get pod %s/%s: %w", namespace, ip.Name, err)
		}
		if p.UID == ip.UID {
			out[i] = p
		}
		return nil
	})
	if err != nil {
		return nil, false, err
	}
	anyBound := slices.ContainsFunc(out, func(p *v1.Pod) bool { return p != nil && p.Spec.NodeName != "" })
	return out, anyBound, nil
}

// finishGroup binds the members the intent names that are still unbound
// (in parallel) and sets the condition. Every claim write precedes the first binding, so
// the claims are complete once any member is bound.
func (s *Scheduler) finishGroup(ctx context.Context, pg *schedulingv1beta1.PodGroup, in intent, pods []*v1.Pod) error {
	err := parallel(ctx, s.cfg.CommitParallelism, len(pods), func(ctx context.Context, i int) error {
		p := pods[i]
		if p == nil || p.Spec.NodeName != "" || p.DeletionTimestamp != nil {
			return nil
		}
		err := s.bind(ctx, p.Namespace, p.Name, p.UID, in.Pods[i].Node)
		if err != nil && !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) {
			return err
		}
		return nil
	})
	if err != nil {
		return err
	}
	msg := fmt.Sprintf("placed %d pods in %s %s (commit finished by recovery)", len(in.Pods), in.TopologyKey, in.Domain)
	return s.setCondition(ctx, pg, metav1.ConditionTrue, "Scheduled", msg)
}

// releaseClaim removes the reservations of consumers from a claim, and its
// allocation when no reservation is left. Live read, conflict retries.
func (s *Scheduler) releaseClaim(ctx context.Context, namespace, name string, consumers map[types.UID]bool) error {
	claims := s.cfg.Client.ResourceV1().ResourceClaims(namespace)
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		c, err := claims.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		var kept []resourceapi.ResourceClaimConsumerReference
		for _, r := range c.Status.ReservedFor {
			if !consumers[r.UID] {
				kept = append(kept, r)
			}
		}
		if len(kept) == len(c.Status.ReservedFor) && (len(kept) > 0 || c.Status.Allocation == nil) {
			return nil
		}
		if err := s.step(StepClaimStatus, namespace+"/"+name); err != nil {
			return err
		}
		c = c.DeepCopy()
		c.Status.ReservedFor = kept
		if len(kept) == 0 {
			c.Status.Allocation = nil
		}
		_, err = claims.UpdateStatus(ctx, c, metav1.UpdateOptions{FieldManager: schedulerName})
		return err
	})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("release claim %s/%s: %w", namespace, name, err)
	}
	return nil
}

// releasePodClaims undoes a failed commit of a gang of one: unless the pod
// got bound, its reservations (and allocations left without one) go.
func (s *Scheduler) releasePodClaims(ctx context.Context, pod *v1.Pod, writes []claimWrite) error {
	p, err := s.cfg.Client.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("get pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	if err == nil && p.UID == pod.UID && p.Spec.NodeName != "" {
		return nil // the binding went through: the commit is complete
	}
	for _, w := range writes {
		if err := s.releaseClaim(ctx, pod.Namespace, w.claim.Name, map[types.UID]bool{pod.UID: true}); err != nil {
			return err
		}
	}
	return nil
}

// releaseUnboundPods drops the reservations of claims held for unbound pods
// of ours: no commit of ours is in flight while it runs.
func (s *Scheduler) releaseUnboundPods(ctx context.Context) error {
	claims, err := s.claims.List(labels.Everything())
	if err != nil {
		return fmt.Errorf("list claims: %w", err)
	}
	for _, c := range claims {
		if c.Status.Allocation == nil {
			continue
		}
		for _, r := range c.Status.ReservedFor {
			if r.APIGroup != "" || r.Resource != "pods" {
				continue
			}
			if p, err := s.pods.Pods(c.Namespace).Get(r.Name); err != nil || p.UID != r.UID || !ours(p) || p.Spec.NodeName != "" {
				continue
			}
			live, err := s.cfg.Client.CoreV1().Pods(c.Namespace).Get(ctx, r.Name, metav1.GetOptions{})
			if err != nil || live.UID != r.UID || live.Spec.NodeName != "" {
				continue // gone (kube-controller-manager cleans up) or bound
			}
			klog.FromContext(ctx).Info("Releasing claim reserved for an unbound pod", "claim", klog.KObj(c), "pod", klog.KObj(live))
			if err := s.releaseClaim(ctx, c.Namespace, c.Name, map[types.UID]bool{r.UID: true}); err != nil {
				return err
			}
		}
	}
	return nil
}
