package commit

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"

	"github.com/gpufabric/gpufabric/pkg/gang/gate"
)

// Parallel calls fn(ctx, i) for every i in [0, n) on at most workers
// goroutines (one phase of a commit or recovery).
//
// After the first error no further call starts. Calls already started are
// never abandoned: they run to completion with ctx, and Parallel returns
// only once every started call has returned. So when the caller undoes a
// failed phase, no write of it is still in flight, and a "killed" scheduler
// (gate.ErrAborted) leaves exactly the writes that got past the hook.
//
// It returns an error wrapping gate.ErrAborted if any call aborted (the process
// is "dead": nothing may be undone), else the first error.
func Parallel(ctx context.Context, workers, n int, fn func(ctx context.Context, i int) error) error {
	workers = min(max(workers, 1), n)
	var (
		next    atomic.Int64
		stopped atomic.Bool
		mu      sync.Mutex
		first   error
		aborted error
		wg      sync.WaitGroup
	)
	record := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		if first == nil {
			first = err
		}
		if aborted == nil && errors.Is(err, gate.ErrAborted) {
			aborted = err
		}
		stopped.Store(true)
	}
	for range workers {
		wg.Go(func() {
			for !stopped.Load() {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if err := ctx.Err(); err != nil {
					record(err)
					return
				}
				if err := fn(ctx, i); err != nil {
					record(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if aborted != nil {
		return aborted
	}
	return first
}
