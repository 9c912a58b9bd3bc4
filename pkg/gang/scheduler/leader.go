package scheduler

import (
	"context"
	"errors"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"
)

// LeaderElection configures the Lease that decides which replica schedules.
type LeaderElection struct {
	Namespace string
	// Name of the Lease. Default "gpufabric-scheduler".
	Name string
	// Identity of this replica (e.g. the pod name). Required.
	Identity string
	// LeaseDuration, RenewDeadline, RetryPeriod: defaults 15s, 10s, 2s.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
}

// ErrLostLeadership is returned by RunWithLeaderElection when the replica
// stops leading; the process should exit and start over.
var ErrLostLeadership = errors.New("lost leadership")

// RunWithLeaderElection runs a new Scheduler (and the fabric-domain
// publisher) while this replica holds the Lease. Rules: each term gets a
// fresh Scheduler, which recovers half-done commits before it schedules; a
// term ends when ctx is done (nil), when the Scheduler fails, or when the
// Lease is lost (ErrLostLeadership).
func RunWithLeaderElection(ctx context.Context, cfg Config, le LeaderElection) error {
	if le.Identity == "" || le.Namespace == "" {
		return fmt.Errorf("leader election: identity and namespace are required")
	}
	if le.Name == "" {
		le.Name = schedulerName
	}
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: le.Namespace, Name: le.Name},
		Client:     cfg.Client.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: le.Identity},
	}
	outer := ctx
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var runErr error
	elector, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:            lock,
		LeaseDuration:   orDefault(le.LeaseDuration, 15*time.Second),
		RenewDeadline:   orDefault(le.RenewDeadline, 10*time.Second),
		RetryPeriod:     orDefault(le.RetryPeriod, 2*time.Second),
		ReleaseOnCancel: true,
		Name:            le.Name,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context) {
				klog.FromContext(ctx).Info("Started leading", "identity", le.Identity)
				s, err := New(cfg)
				if err == nil {
					err = s.Run(ctx)
				}
				runErr = err
				cancel()
			},
			OnStoppedLeading: func() {},
		},
	})
	if err != nil {
		return fmt.Errorf("leader election: %w", err)
	}
	elector.Run(ctx) // returns when ctx is done or the term ended
	switch {
	case runErr != nil:
		return runErr
	case outer.Err() != nil:
		return nil
	}
	return ErrLostLeadership
}

func orDefault(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}
