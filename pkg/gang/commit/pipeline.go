package commit

import (
	"sync"

	"github.com/gpufabric/gpufabric/pkg/gang/gate"
)

// Pipeline runs the commits of placed gangs beside the worker, so the
// placement of the next gang does not wait for the API writes of the last
// (docs/design/commit.md, "Pipelined commits").
//
// Rules: the worker puts a decision in the assume cache (in flight) before
// its commit starts, so every later snapshot counts its devices as taken;
// the entry leaves only after the commit and any undo returned. A gang's
// queue key stays processing until its commit ended, so no second attempt
// of the gang runs meanwhile. At most `slots` commits run at once: Start
// blocks the worker for a free slot. The first commit that ends with an
// error that stops the scheduler (a hook abort, a lost Lease) is kept:
// every later write of every commit checks it (the gate's Stopped is
// Stopped) and fails, onStop runs once (it shuts the queue, so the worker
// wakes), and the worker returns it after Wait. Safe for concurrent use.
type Pipeline struct {
	slots  chan struct{}
	wg     sync.WaitGroup
	onStop func()

	mu      sync.Mutex
	stopErr error
}

// NewPipeline returns a pipeline of slots commits at once (at least one);
// onStop runs once, when the first commit stops the scheduler.
func NewPipeline(slots int, onStop func()) *Pipeline {
	return &Pipeline{slots: make(chan struct{}, max(slots, 1)), onStop: onStop}
}

// Start runs fn in the background once a slot is free. fn's error is kept
// when it stops the scheduler; any other error fn handles itself.
func (p *Pipeline) Start(fn func() error) {
	p.slots <- struct{}{}
	p.wg.Go(func() {
		defer func() { <-p.slots }()
		if err := fn(); gate.Stops(err) {
			p.stop(err)
		}
	})
}

func (p *Pipeline) stop(err error) {
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

// Stopped returns the error that stopped the scheduler, or nil.
func (p *Pipeline) Stopped() error {
	if p == nil {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stopErr
}

// Wait returns once no commit is in flight.
func (p *Pipeline) Wait() { p.wg.Wait() }
