package commit

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpufabric/gpufabric/pkg/gang/gate"
)

// TestCommitPipeline: no more commits run at once than the slots; the
// first error that stops the scheduler is kept and onStop runs once, other
// errors are not kept; wait returns once every commit ended.
func TestCommitPipeline(t *testing.T) {
	var stops atomic.Int32
	p := NewPipeline(3, func() { stops.Add(1) })
	var running, peak atomic.Int32
	release := make(chan struct{})
	var mu sync.Mutex
	ended := 0
	for i := range 10 {
		p.Start(func() error {
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
	p.Wait()
	if ended != 10 {
		t.Errorf("%d commits ended after wait, want 10", ended)
	}
	if got := peak.Load(); got > 3 {
		t.Errorf("peak %d commits at once, want at most 3", got)
	}
	err := p.Stopped()
	if !errors.Is(err, gate.ErrFenced) || err.Error() != "commit 6: "+gate.ErrFenced.Error() && err.Error() != "commit 8: "+gate.ErrFenced.Error() {
		t.Errorf("Stopped() = %v, want the error of commit 6 or 8 (whichever ended first)", err)
	}
	if n := stops.Load(); n != 1 {
		t.Errorf("onStop ran %d times, want 1", n)
	}
}
