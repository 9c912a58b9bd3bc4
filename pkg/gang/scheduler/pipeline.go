package scheduler

import (
	"sync"

	"github.com/gpufabric/gpufabric/pkg/gang/gate"
)

// commitPipeline runs the commits of placed gangs beside the worker, so the
// placement of the next gang does not wait for the API writes of the last
// (docs/design/commit.md, "Pipelined commits").
//
// Rules: the worker puts a decision in the assume cache (in flight) before
// its commit starts, so every later snapshot counts its devices as taken;
// the entry leaves only after the commit and any undo returned. A gang's
// queue key stays processing until its commit ended, so no second attempt
// of the gang runs meanwhile. At most `slots` commits run at once: start
// blocks the worker for a free slot. The first commit that ends with an
// error that stops the scheduler (a hook abort, a lost Lease) is kept:
// every later write of every commit checks it (Scheduler.step) and fails,
// onStop runs once (it shuts the queue, so the worker wakes), and the
// worker returns it after wait. Safe for concurrent use.
type commitPipeline struct {
	slots  chan struct{}
	wg     sync.WaitGroup
	onStop func()

	mu      sync.Mutex
	stopErr error
}

func newCommitPipeline(slots int, onStop func()) *commitPipeline {
	return &commitPipeline{slots: make(chan struct{}, max(slots, 1)), onStop: onStop}
}

// start runs fn in the background once a slot is free. fn's error is kept
// when it stops the scheduler; any other error fn handles itself.
func (p *commitPipeline) start(fn func() error) {
	p.slots <- struct{}{}
	p.wg.Go(func() {
		defer func() { <-p.slots }()
		if err := fn(); gate.Stops(err) {
			p.stop(err)
		}
	})
}

func (p *commitPipeline) stop(err error) {
	p.mu.Lock()
	first := p.stopErr == nil
	if first {
		p.stopErr = err
	}
	p.mu.Unlock()
	if first && p.onStop != nil {
		p.onStop()
	}
}

// stopped returns the error that stopped the scheduler, or nil.
func (p *commitPipeline) stopped() error {
	if p == nil {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stopErr
}

// wait returns once no commit is in flight.
func (p *commitPipeline) wait() { p.wg.Wait() }
