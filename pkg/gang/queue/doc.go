// Package queue is gpufabric-scheduler's one queue of gangs, modelled on
// kube-scheduler's scheduling queue: an active queue served by rank, a
// backoff queue, and the parked (unschedulable) gangs, plus the gangs not
// ready yet. It also owns the gang keys (in vocab's format, which
// nomination records store). It knows nothing of the scheduler that drives
// it: the scheduler injects the rank function and calls Interface; the
// informers' handlers call Events.
//
// Files: queue.go (Interface, Events, Config, Queue: add, get, wait,
// forget, counts), parked.go (the parked gangs and the wake-ups),
// backoffq.go (the backoff queue), priority.go (Rank, the active queue's
// order), fair.go (each namespace's share of the worker's time), keys.go
// (gang keys).
//
// Rules:
//   - A key is processed by one worker at a time (workqueue); of the ready
//     keys, the highest priority goes first; between namespaces at that
//     priority, the one whose attempts used the least of the worker's time
//     (Charge; start-time fair queuing, no credit for idle time); within a
//     namespace, the oldest gang, then the smaller key (Rank). A key's rank
//     is read when it is queued or touched again, and for all queued keys
//     by SetRank and Reorder. In a cluster of one namespace, or when
//     nothing is charged, this is priority, then age, then key.
//   - A gang that could not be placed is parked: it is not retried before
//     its backoff (exponential with jitter, InitialBackoff..MaxBackoff)
//     ends, and after that only when a cluster change that can help
//     arrives (FlushParked) or MaxUnschedulableWait passes. A gang parked
//     short of free devices is not woken by a bound pod that finished or
//     went (NodeResourcesFreed), only by a change that can free devices,
//     and by claims freeing devices only once they freed as many as it
//     lacked (DevicesFreed).
//   - A woken gang whose backoff has not ended waits in the backoff queue,
//     which hands it out early when nothing else is ready (kube-scheduler's
//     SchedulerPopFromBackoffQ); a gang that errored (ParkError) or timed
//     out (ParkTimedOut) waits its backoff out.
//   - A gang that timed out (its attempt spent the placement budget, or
//     its claims ran out of the allocator's time) backs off harder: its
//     attempt counts TimedOutWeight times and its backoff may reach
//     TimedOutMaxFactor × MaxBackoff.
//   - A gang whose commit lost a race (RetryConflict) waits out a backoff
//     of its own (ConflictBackoff, doubled per conflict since the gang was
//     last forgotten, up to MaxBackoff) and wakes no other gang; only when
//     its retry ends parked are the other parked gangs woken, once.
//   - A gang that is not ready (too few members, a claim missing) waits for
//     an event about itself (Add) or a claim in its namespace (WakeWaiting).
//   - An attempt passes the Cycle it started at to Park* and Wait: when a
//     change that can help arrived meanwhile, the gang is retried after its
//     backoff instead of parked or left waiting.
//   - Timers (a not-ready gang's settle, a park's MaxUnschedulableWait) act
//     only if the gang is still in the state that set them.
//
// Lock order: Queue.mu, then the workqueue's lock, then prioQueue.mu, then
// whatever the RankFunc takes (the informers' indexers). The workqueue
// calls prioQueue with its own lock held; the RankFunc never calls the
// queue. Timer callbacks take Queue.mu and nothing before it; Get waits in
// the workqueue without Queue.mu. A fake clock runs timer callbacks inside
// its Step, under its own lock: tests step it only while no other
// goroutine is inside the queue (a worker blocked in Get for a key is
// fine).
package queue
