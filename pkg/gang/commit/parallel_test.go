package commit

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpufabric/gpufabric/pkg/gang/gate"
)

// TestParallelBoundsWorkers: never more than workers calls at once, every
// index once.
func TestParallelBoundsWorkers(t *testing.T) {
	var running, peak atomic.Int32
	seen := make([]atomic.Int32, 100)
	err := Parallel(t.Context(), 4, len(seen), func(_ context.Context, i int) error {
		n := running.Add(1)
		defer running.Add(-1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		time.Sleep(time.Millisecond)
		seen[i].Add(1)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if p := peak.Load(); p > 4 || p < 2 {
		t.Errorf("peak concurrency %d, want 2..4", p)
	}
	for i := range seen {
		if n := seen[i].Load(); n != 1 {
			t.Errorf("index %d called %d times", i, n)
		}
	}
	if err := Parallel(t.Context(), 16, 0, nil); err != nil {
		t.Errorf("empty phase: %v", err)
	}
}

// TestParallelStopsAfterError: after the first error nothing new starts,
// started calls finish before parallel returns, and an abort wins over any
// other error.
func TestParallelStopsAfterError(t *testing.T) {
	boom := errors.New("boom")
	var mu sync.Mutex
	var started, finished []int
	var barrier sync.WaitGroup
	barrier.Add(3)
	err := Parallel(t.Context(), 3, 50, func(_ context.Context, i int) error {
		mu.Lock()
		started = append(started, i)
		mu.Unlock()
		if i < 3 {
			barrier.Done()
			barrier.Wait() // 0, 1 and 2 are in flight together
		}
		switch i {
		case 0:
			time.Sleep(20 * time.Millisecond) // still in flight after both errors
		case 1:
			return boom
		case 2:
			time.Sleep(10 * time.Millisecond)
			return fmt.Errorf("%w: write 2", gate.ErrAborted)
		}
		mu.Lock()
		finished = append(finished, i)
		mu.Unlock()
		return nil
	})
	if !errors.Is(err, gate.ErrAborted) {
		t.Fatalf("error %v, want gate.ErrAborted (an abort wins over boom)", err)
	}
	if len(started) != 3 || fmt.Sprint(finished) != "[0]" {
		t.Errorf("started %v, finished %v; want 3 started, the one in flight finished", started, finished)
	}
	err = Parallel(t.Context(), 1, 10, func(_ context.Context, i int) error {
		if i == 3 {
			return boom
		}
		if i > 3 {
			t.Errorf("index %d started after the error", i)
		}
		return nil
	})
	if !errors.Is(err, boom) {
		t.Errorf("error %v, want boom", err)
	}
}
