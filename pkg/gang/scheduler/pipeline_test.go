package scheduler

import (
	"errors"
	"fmt"
	"github.com/gpufabric/gpufabric/pkg/gang/gate"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestCommitPipeline: no more commits run at once than the slots; the
// first error that stops the scheduler is kept and onStop runs once, other
// errors are not kept; wait returns once every commit ended.
func TestCommitPipeline(t *testing.T) {
	var stops atomic.Int32
	p := newCommitPipeline(3, func() { stops.Add(1) })
	var running, peak atomic.Int32
	release := make(chan struct{})
	var mu sync.Mutex
	ended := 0
	for i := range 10 {
		p.start(func() error {
			n := running.Add(1)
			for {
				old := peak.Load()
				if n <= old || peak.CompareAndSwap(old, n) {
					break
				}
			}
			if i < 3 {
				<-release // the first three hold their slots until released
			}
			time.Sleep(time.Millisecond)
			running.Add(-1)
			mu.Lock()
			ended++
			mu.Unlock()
			switch i {
			case 4:
				return errors.New("a commit error the commit handles itself")
			case 6, 8:
				return fmt.Errorf("commit %d: %w", i, gate.ErrFenced)
			}
			return nil
		})
		if i == 2 {
			if got := running.Load(); got > 3 {
				t.Fatalf("%d commits running, want at most 3", got)
			}
			close(release)
		}
	}
	p.wait()
	if ended != 10 {
		t.Errorf("%d commits ended after wait, want 10", ended)
	}
	if got := peak.Load(); got > 3 {
		t.Errorf("peak %d commits at once, want at most 3", got)
	}
	err := p.stopped()
	if !errors.Is(err, gate.ErrFenced) || err.Error() != "commit 6: "+gate.ErrFenced.Error() && err.Error() != "commit 8: "+gate.ErrFenced.Error() {
		t.Errorf("stopped() = %v, want the error of commit 6 or 8 (whichever ended first)", err)
	}
	if n := stops.Load(); n != 1 {
		t.Errorf("onStop ran %d times, want 1", n)
	}
}

// TestAssumeInFlight: an entry in flight is never dropped by what the
// informers show; once completed it ends by the visibility rules; a failed
// commit's entry is dropped.
func TestAssumeInFlight(t *testing.T) {
	a := newAssumeCache()
	always := func(*assumed) bool { return true }
	a.addInFlight("ns/g", nil, nil)
	if !a.waiting("ns/g", always) || len(a.pending(always)) != 1 {
		t.Fatal("an entry in flight was dropped as visible")
	}
	a.complete("ns/g", nil)
	if a.waiting("ns/g", always) || a.len() != 0 {
		t.Fatal("a completed entry the informers show was kept")
	}
	a.addInFlight("ns/h", nil, nil)
	a.drop("ns/h")
	if a.len() != 0 {
		t.Fatal("a dropped entry was kept")
	}
}
