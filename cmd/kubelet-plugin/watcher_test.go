package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"k8s.io/klog/v2/ktesting"

	"github.com/gpufabric/gpufabric/pkg/devices"
	"github.com/gpufabric/gpufabric/pkg/devices/mock"
)

// run is what one fake watcher run does: how long it lasts and how it
// ends ("err", "panic", "nil", "block": until ctx is done).
type run struct {
	lasts time.Duration
	end   string
}

func TestSupervisorBackoff(t *testing.T) {
	errBoom := errors.New("boom")
	for _, tc := range []struct {
		name      string
		runs      []run
		wantWaits []time.Duration
		wantErr   error
	}{
		{"doubles to the cap", []run{{0, "err"}, {0, "err"}, {0, "nil"}, {0, "panic"}, {0, "err"}, {0, "err"}, {0, "err"}, {0, "err"}, {0, "err"}, {0, "block"}},
			[]time.Duration{1 * time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second, 32 * time.Second, time.Minute, time.Minute, time.Minute}, nil},
		{"a healthy run resets the backoff", []run{{0, "err"}, {0, "err"}, {0, "err"}, {2 * time.Minute, "err"}, {0, "err"}, {0, "block"}},
			[]time.Duration{1 * time.Second, 2 * time.Second, 4 * time.Second, 1 * time.Second, 2 * time.Second}, nil},
		{"not supported stops for good", []run{{0, "err"}, {0, "unsupported"}},
			[]time.Duration{1 * time.Second}, nvml.ERROR_NOT_SUPPORTED},
		{"a watcher that never dies is never restarted", []run{{0, "block"}}, nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			ctx, cancel := context.WithCancel(ctx)
			defer cancel()
			clock := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
			var waits []time.Duration
			i := 0
			s := &supervisor{
				run: func(ctx context.Context) error {
					r := tc.runs[i]
					i++
					clock = clock.Add(r.lasts)
					switch r.end {
					case "panic":
						panic("nil map")
					case "nil":
						return nil
					case "unsupported":
						return fmt.Errorf("create event set: %w", nvml.ERROR_NOT_SUPPORTED)
					case "block":
						cancel()
						<-ctx.Done()
						return nil
					}
					return errBoom
				},
				permanent: func(err error) bool { return errors.Is(err, nvml.ERROR_NOT_SUPPORTED) },
				onRestart: func(_ context.Context, err error, wait time.Duration) {
					if err == nil {
						t.Error("restart without a reason")
					}
					waits = append(waits, wait)
				},
				initial: time.Second, max: time.Minute, healthy: time.Minute,
				now:   func() time.Time { return clock },
				sleep: func(_ context.Context, d time.Duration) { clock = clock.Add(d) },
			}
			err := s.loop(ctx)
			if !errors.Is(err, tc.wantErr) || (err == nil) != (tc.wantErr == nil) {
				t.Errorf("loop returned %v, want %v", err, tc.wantErr)
			}
			if !slices.Equal(waits, tc.wantWaits) {
				t.Errorf("waits %v, want %v", waits, tc.wantWaits)
			}
			if i != len(tc.runs) {
				t.Errorf("%d runs, want %d", i, len(tc.runs))
			}
		})
	}
}

// TestSupervisorRestartsMockWatcher: the mock's event sets fail twice
// (eventSet fault); the supervised watcher restarts twice, then delivers
// the node's Xid.
func TestSupervisorRestartsMockWatcher(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	dir := t.TempDir()
	path := filepath.Join(dir, "fabric.yaml")
	fabric := "nodeGroups:\n- name: n1\n  gpus: {model: H100, count: 2}\n  nvlink: {kind: nvswitch}\n" +
		"faults:\n- node: n1\n  eventSet: {createFailures: 2}\n- node: n1\n  xid: {gpu: 1, xid: 79}\n"
	if err := os.WriteFile(path, []byte(fabric), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := mock.LoadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b, err := f.Backend("n1", filepath.Join(dir, "n1"))
	if err != nil {
		t.Fatal(err)
	}
	out := make(chan devices.Event, 4)
	restarts := 0
	s := &supervisor{
		run:       func(ctx context.Context) error { return devices.WatchEvents(ctx, b.NVML(), out) },
		onRestart: func(context.Context, error, time.Duration) { restarts++ },
		initial:   time.Millisecond, max: 4 * time.Millisecond, healthy: time.Minute,
		now: time.Now, sleep: sleepCtx,
	}
	done := make(chan error, 1)
	go func() { done <- s.loop(ctx) }()
	select {
	case ev := <-out:
		if ev.Kind != devices.EventXID || ev.XID != 79 {
			t.Errorf("event %+v, want xid 79", ev)
		}
	case <-ctx.Done():
		t.Fatal("no event from the restarted watcher")
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("loop: %v", err)
	}
	if restarts != 2 {
		t.Errorf("%d restarts, want 2", restarts)
	}
}
