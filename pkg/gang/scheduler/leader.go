package scheduler

import (
	"context"
	"errors"
	"fmt"
	"github.com/gpufabric/gpufabric/pkg/gang/gate"
	"sync"
	"sync/atomic"
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
	// Identity of this replica: its pod name, which the chart's admission
	// policy compares with the Lease's holder to fence writes. Required.
	Identity string
	// LeaseDuration, RenewDeadline, RetryPeriod: defaults 15s, 10s, 2s.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	// WatchDog, when set, watches the elector for a liveness check: it
	// fails once this replica leads but has not renewed the Lease for
	// LeaseDuration plus the adaptor's timeout (a wedged leader).
	WatchDog *leaderelection.HealthzAdaptor
}

// ErrLostLeadership is returned by RunWithLeaderElection when the replica
// stops leading; the process should exit and start over.
var ErrLostLeadership = errors.New("lost leadership")

// RunWithLeaderElection runs a new Scheduler (and the fabric-domain
// publisher) while this replica holds the Lease. Rules: each term gets a
// fresh Scheduler, which recovers half-done commits before it schedules; a
// term ends when ctx is done (nil), when the Scheduler fails, or when the
// Lease is lost or may be lost (ErrLostLeadership).
//
// Fencing: before every write the Scheduler checks that the last renewal
// of the Lease was sent less than RenewDeadline ago (monotonic clock, so a
// process paused past its Lease finds out when it resumes); other replicas
// take the Lease only LeaseDuration after they saw that renewal. A write
// already on the wire when the process pauses is refused by the chart's
// admission policy once another replica holds the Lease.
func RunWithLeaderElection(ctx context.Context, cfg Config, le LeaderElection) error {
	if le.Identity == "" || le.Namespace == "" {
		return fmt.Errorf("leader election: identity and namespace are required")
	}
	if le.Name == "" {
		le.Name = schedulerName
	}
	le.LeaseDuration = orDefault(le.LeaseDuration, 15*time.Second)
	le.RenewDeadline = orDefault(le.RenewDeadline, 10*time.Second)
	le.RetryPeriod = orDefault(le.RetryPeriod, 2*time.Second)
	lock := &observedLock{Interface: &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: le.Namespace, Name: le.Name},
		Client:     cfg.Client.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: le.Identity},
	}}
	cfg.Fence = func() error { return lock.renewedWithin(le.RenewDeadline) }
	outer := ctx
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var started atomic.Bool
	done := make(chan error, 1)
	elector, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:            lock,
		LeaseDuration:   le.LeaseDuration,
		RenewDeadline:   le.RenewDeadline,
		RetryPeriod:     le.RetryPeriod,
		ReleaseOnCancel: true,
		Name:            le.Name,
		WatchDog:        le.WatchDog,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context) {
				started.Store(true)
				klog.FromContext(ctx).Info("Started leading", "identity", le.Identity)
				s, err := New(cfg)
				if err == nil {
					err = s.Run(ctx)
				}
				done <- err
				cancel()
			},
			OnStoppedLeading: func() {},
		},
	})
	if err != nil {
		return fmt.Errorf("leader election: %w", err)
	}
	if le.WatchDog != nil {
		le.WatchDog.SetLeaderElection(elector) // NewLeaderElector does not; only RunOrDie does
	}
	elector.Run(ctx) // returns when ctx is done or the term ended
	cancel()
	var runErr error
	if started.Load() {
		// The term's scheduler stops on ctx; its writes in flight return.
		select {
		case runErr = <-done:
		case <-time.After(termStopTimeout):
			klog.FromContext(outer).Info("The scheduler did not stop in time after the term ended", "timeout", termStopTimeout)
		}
	}
	switch {
	case errors.Is(runErr, gate.ErrFenced):
		return fmt.Errorf("%w: %w", ErrLostLeadership, runErr)
	case runErr != nil:
		return runErr
	case outer.Err() != nil:
		return nil
	}
	return ErrLostLeadership
}

// termStopTimeout bounds how long a term's end waits for its scheduler.
const termStopTimeout = 30 * time.Second

// observedLock is the elector's Lock; it remembers when the last successful
// acquisition or renewal by this replica was sent.
type observedLock struct {
	resourcelock.Interface
	mu      sync.Mutex
	renewed time.Time // with a monotonic reading
}

func (l *observedLock) Create(ctx context.Context, r resourcelock.LeaderElectionRecord) error {
	sent := time.Now()
	err := l.Interface.Create(ctx, r)
	l.observe(sent, r, err)
	return err
}

func (l *observedLock) Update(ctx context.Context, r resourcelock.LeaderElectionRecord) error {
	sent := time.Now()
	err := l.Interface.Update(ctx, r)
	l.observe(sent, r, err)
	return err
}

func (l *observedLock) observe(sent time.Time, r resourcelock.LeaderElectionRecord, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err == nil && r.HolderIdentity == l.Identity() {
		l.renewed = sent
	} else if err == nil {
		l.renewed = time.Time{} // released
	}
}

// renewedWithin returns an error unless this replica's last renewal was sent
// less than d ago.
func (l *observedLock) renewedWithin(d time.Duration) error {
	l.mu.Lock()
	renewed := l.renewed
	l.mu.Unlock()
	if renewed.IsZero() {
		return errors.New("the Lease is not held")
	}
	if age := time.Since(renewed); age >= d {
		return fmt.Errorf("the Lease was last renewed %s ago, the renew deadline is %s", age.Round(time.Millisecond), d)
	}
	return nil
}

func orDefault(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}
