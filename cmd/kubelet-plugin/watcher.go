package main

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"github.com/gpufabric/gpufabric/pkg/claims/node"
	"github.com/gpufabric/gpufabric/pkg/devices"
)

// Node event reason of a restarted GPU event watcher.
const reasonWatcherRestarted = "GPUEventWatcherRestarted"

// Backoff of the GPU event watcher's restarts: 1 s doubling to 1 min,
// back to 1 s after a run of at least a minute.
const (
	watcherInitialBackoff = time.Second
	watcherMaxBackoff     = time.Minute
	watcherHealthyRun     = time.Minute
)

// supervisor runs a watcher until ctx is done and restarts it when it
// dies: when it returns (an error, or nil while ctx is not done) or
// panics. Rules: the wait before a restart starts at initial and doubles
// up to max; a run that lasted at least healthy resets it. An error for
// which permanent is true stops supervision (the watcher cannot work on
// this node). onRestart is called before each wait (metric, event), at
// most once per initial.
type supervisor struct {
	run                   func(context.Context) error
	permanent             func(error) bool
	onRestart             func(ctx context.Context, err error, wait time.Duration)
	initial, max, healthy time.Duration
	now                   func() time.Time
	sleep                 func(context.Context, time.Duration)
}

// loop supervises until ctx is done; it returns the permanent error, or
// nil.
func (s *supervisor) loop(ctx context.Context) error {
	wait := s.initial
	for ctx.Err() == nil {
		start := s.now()
		err := s.runOnce(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if err == nil {
			err = errors.New("the watcher returned")
		}
		if s.permanent != nil && s.permanent(err) {
			return err
		}
		if s.now().Sub(start) >= s.healthy {
			wait = s.initial
		}
		s.onRestart(ctx, err, wait)
		s.sleep(ctx, wait)
		wait = min(2*wait, s.max)
	}
	return nil
}

// runOnce runs the watcher once, turning a panic into an error.
func (s *supervisor) runOnce(ctx context.Context) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("the watcher panicked: %v", r)
			klog.FromContext(ctx).Error(err, "GPU event watcher panicked", "stack", string(debug.Stack()))
		}
	}()
	return s.run(ctx)
}

// watchEvents watches the GPUs' NVML events until ctx is done, restarted
// with backoff when the watcher dies (a metric and a Node event each
// time). A node whose NVML has no event sets (ERROR_NOT_SUPPORTED) keeps
// its health from re-discovery (an event on the Node says so).
func (p *plugin) watchEvents(ctx context.Context, backend devices.Backend, out chan<- devices.Event) {
	s := &supervisor{
		run:       func(ctx context.Context) error { return devices.WatchEvents(ctx, backend.NVML(), out) },
		permanent: func(err error) bool { return errors.Is(err, nvml.ERROR_NOT_SUPPORTED) },
		onRestart: p.watcherRestarted,
		initial:   watcherInitialBackoff, max: watcherMaxBackoff, healthy: watcherHealthyRun,
		now: time.Now, sleep: sleepCtx,
	}
	if err := s.loop(ctx); err != nil {
		klog.FromContext(ctx).Error(err, "GPU events are not watched; health comes from re-discovery only", "interval", p.opts.healthInterval)
		p.recordEvent(ctx, node.Event{Type: corev1.EventTypeWarning, Reason: reasonGPUEventsUnwatched,
			Message: fmt.Sprintf("GPU Xid/ECC events are not watched (%v); faults show up within %s", err, p.opts.healthInterval)})
	}
}

func (p *plugin) watcherRestarted(ctx context.Context, err error, wait time.Duration) {
	p.metrics.watcherRestarts.Inc()
	klog.FromContext(ctx).Error(err, "GPU event watcher died; restarting", "in", wait)
	p.recordEvent(ctx, node.Event{Type: corev1.EventTypeWarning, Reason: reasonWatcherRestarted,
		Message: fmt.Sprintf("the GPU event watcher stopped (%v); restarting in %s (faults still show up within %s)", err, wait, p.opts.healthInterval)})
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
