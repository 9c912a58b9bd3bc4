package queue

import (
	"math/rand/v2"
	"sync"
	"time"

	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
)

// Interface is the gang queue as the scheduler's worker sees it. *Queue
// implements it.
type Interface interface {
	Events
	// Get hands out the next gang, waiting for one; quit once shut down.
	// Called by the one worker, which calls Done(key) when the attempt
	// (and its commit) ended.
	Get() (key string, quit bool)
	Done(key string)
	ShutDown()
	// Cycle returns the move counter at the start of an attempt; the
	// attempt's outcome passes it to Park*, Wait.
	Cycle() uint64
	Park(key string, cycle uint64) time.Duration
	ParkDevicesShort(key string, cycle uint64, short int) time.Duration
	ParkError(key string, cycle uint64) time.Duration
	ParkTimedOut(key string, cycle uint64) time.Duration
	ParkShort(key string, cycle uint64) time.Duration
	Wait(key, namespace string, cycle uint64)
	Forget(key string)
	RetryAfter(key string, d time.Duration)
	RetryConflict(key string) time.Duration
	RetryWhileWaiting(key string, d time.Duration)
	// SetRank and Reorder set and re-read the active queue's order.
	SetRank(f RankFunc)
	Reorder()
	// Charge tells the queue what an attempt of the gang cost the worker:
	// its namespace's share of the worker's time (fair.go).
	Charge(key string, d time.Duration)
	// Counts reports the gangs by state, for the metrics.
	Counts() map[string]int
}

// Events is what the informers' handlers call: an event about a gang
// itself, and the cluster changes that wake parked or waiting gangs.
type Events interface {
	Add(key string)
	FlushParked()
	NodeResourcesFreed()
	DevicesFreed(n int)
	WakeWaiting(namespace string)
}

var _ Interface = (*Queue)(nil)

// DefaultConflictBackoff is Config.ConflictBackoff's default.
const DefaultConflictBackoff = 100 * time.Millisecond

// Config of a Queue. The backoffs are used as given (the scheduler's
// Config sets their defaults).
type Config struct {
	// InitialBackoff and MaxBackoff bound the exponential backoff (with
	// jitter) of an unschedulable gang.
	InitialBackoff, MaxBackoff time.Duration
	// MaxUnschedulableWait is how long a parked gang waits for a change
	// that can help before it is retried anyway.
	MaxUnschedulableWait time.Duration
	// ConflictBackoff is the first backoff of a gang whose commit lost a
	// race (RetryConflict); it doubles with each conflict, up to
	// MaxBackoff. Default DefaultConflictBackoff.
	ConflictBackoff time.Duration
	// Clock, when set, replaces the real clock (tests). A fake clock
	// (k8s.io/utils/clock/testing) runs the queue's timers inside Step.
	Clock clock.WithTickerAndDelayedExecution
}

// Queue is the one queue of gangs, composed of an active queue served by
// rank (priority.go), a backoff queue (backoffq.go), the parked gangs
// (parked.go) and the not-ready gangs waiting for an event. Safe for
// concurrent use; see doc.go for the rules and the lock order.
type Queue struct {
	// active: the ready keys (a workqueue: one worker per key at a time),
	// served by order (rank: priority, then age).
	active              workqueue.TypedDelayingInterface[string]
	order               *prioQueue
	initial, maxBackoff time.Duration
	maxWait             time.Duration
	conflictBackoff     time.Duration
	clock               clock.WithTickerAndDelayedExecution

	mu       sync.Mutex
	attempts map[string]int
	// conflicts counts each gang's commit conflicts since it was last
	// forgotten (placed or gone): its conflict backoff (RetryConflict).
	conflicts map[string]int
	// owesWake: gangs whose commit conflicted since their last attempt
	// ended otherwise; the devices their decision had assumed are free
	// again, so when such a gang is parked (it did not take them back),
	// the other parked gangs are woken once (backoffq.go).
	owesWake map[string]bool
	// parked: unschedulable gangs waiting for a change that can help.
	parked parkedSet
	// backoffQ: woken gangs waiting for their backoff's end.
	backoffQ backoffQueue
	// errored: gangs backing off after an error (not a refusal); the
	// backoff queue does not hand them out early.
	errored map[string]bool
	// backoff: every gang with a running backoff → its end (parked or not).
	backoff map[string]time.Time
	// waiting: not-ready gangs → namespace.
	waiting map[string]string
	// moves counts FlushParked, NodeResourcesFreed, DevicesFreed and
	// WakeWaiting calls, so an attempt can tell whether a change that can
	// help arrived while it ran.
	moves uint64
	rnd   *rand.Rand
	// idle: the worker waits in Get for a ready gang.
	idle bool
}

// New returns an empty Queue.
func New(cfg Config) *Queue {
	clk := cfg.Clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	order := newPrioQueue()
	conflictBackoff := cfg.ConflictBackoff
	if conflictBackoff <= 0 {
		conflictBackoff = DefaultConflictBackoff
	}
	return &Queue{
		active: workqueue.NewTypedDelayingQueueWithConfig(workqueue.TypedDelayingQueueConfig[string]{
			Name:  "gangs",
			Clock: clk,
			Queue: workqueue.NewTypedWithConfig(workqueue.TypedQueueConfig[string]{Name: "gangs", Queue: order}),
		}),
		order:      order,
		initial:    cfg.InitialBackoff,
		maxBackoff: cfg.MaxBackoff,
		maxWait:    cfg.MaxUnschedulableWait,
		clock:      clk,
		attempts:   map[string]int{},
		conflicts:  map[string]int{},
		owesWake:   map[string]bool{},
		parked:     newParkedSet(),
		backoffQ:   newBackoffQueue(),
		errored:    map[string]bool{},
		backoff:    map[string]time.Time{},
		waiting:    map[string]string{},
		rnd:        rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 0x9e3779b97f4a7c15)),

		conflictBackoff: conflictBackoff,
	}
}

// Add queues a gang after an event about the gang itself. A gang in
// backoff is queued when its backoff ends.
func (q *Queue) Add(key string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	delete(q.waiting, key)
	q.parked.remove(key)
	q.addLocked(key)
}

func (q *Queue) addLocked(key string) {
	if until, ok := q.backoff[key]; ok {
		if until.After(q.clock.Now()) {
			q.toBackoffQ(key, until)
			return
		}
		delete(q.backoff, key)
	}
	q.active.Add(key)
}

// RetryAfter queues a gang after d without counting an attempt.
func (q *Queue) RetryAfter(key string, d time.Duration) { q.active.AddAfter(key, d) }

// RetryWhileWaiting queues a not-ready gang after d if it is still waiting
// then: an event or an attempt that moved it on meanwhile (its members
// arrived and it was refused, say) drops the timer, which would otherwise
// cost that gang an attempt and a doubled backoff for nothing.
func (q *Queue) RetryWhileWaiting(key string, d time.Duration) {
	q.addAfterIf(key, d, func() bool {
		_, ok := q.waiting[key]
		return ok
	})
}

// addAfterIf queues a gang after d if still (checked then, with q.mu
// held) reports true; still may change the queue's state for the gang.
func (q *Queue) addAfterIf(key string, d time.Duration, still func() bool) {
	q.clock.AfterFunc(d, func() {
		q.mu.Lock()
		defer q.mu.Unlock()
		if still() {
			q.active.Add(key)
		}
	})
}

// Cycle returns the move counter; pass it to Park* and Wait.
func (q *Queue) Cycle() uint64 {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.moves
}

// Wait records a not-ready gang whose attempt started at cycle; like Park,
// it retries at once when something moved meanwhile.
func (q *Queue) Wait(key, namespace string, cycle uint64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.moves != cycle {
		q.addLocked(key)
		return
	}
	q.waiting[key] = namespace
}

// Forget drops all state of a gang (placed, or gone).
func (q *Queue) Forget(key string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	delete(q.attempts, key)
	delete(q.conflicts, key)
	delete(q.owesWake, key)
	q.parked.remove(key)
	delete(q.backoff, key)
	delete(q.waiting, key)
	delete(q.errored, key)
	q.backoffQ.remove(key)
}

// WakeWaiting queues the not-ready gangs of a namespace.
func (q *Queue) WakeWaiting(namespace string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.moves++
	for key, ns := range q.waiting {
		if ns == namespace {
			delete(q.waiting, key)
			q.addLocked(key)
		}
	}
}

// Get hands out the next ready gang, waiting for one. With none ready, it
// takes the woken gang whose backoff ends first (not one that errored)
// from the backoff queue; while it waits, a gang woken into the backoff
// queue is handed out at once (toBackoffQ). Called by the one worker.
func (q *Queue) Get() (string, bool) {
	q.mu.Lock()
	if q.active.Len() == 0 {
		if key, ok := q.backoffQ.popEarliest(q.errored); ok {
			q.active.Add(key)
		}
	}
	q.idle = true
	q.mu.Unlock()
	key, quit := q.active.Get()
	q.mu.Lock()
	q.idle = false
	q.mu.Unlock()
	return key, quit
}

// Done marks the end of the worker's attempt on key.
func (q *Queue) Done(key string) { q.active.Done(key) }

// ShutDown makes Get return quit once the active queue is drained.
func (q *Queue) ShutDown() { q.active.ShutDown() }

// SetRank sets the rank function of the active queue and re-reads every
// queued key's rank.
func (q *Queue) SetRank(f RankFunc) { q.order.setRank(f) }

// Reorder re-reads every queued key's rank (the informers filled since the
// keys were queued).
func (q *Queue) Reorder() { q.order.reorder() }

// Charge adds an attempt's worker time to its gang's namespace: of the
// namespaces with gangs of the same priority ready, the one charged least
// is served first (fair.go).
func (q *Queue) Charge(key string, d time.Duration) { q.order.charge(key, d) }

// Counts reports the queue's gangs by state, for the metrics.
func (q *Queue) Counts() map[string]int {
	q.mu.Lock()
	defer q.mu.Unlock()
	now := q.clock.Now()
	backoff := 0
	for key, until := range q.backoff {
		if !q.parked.has(key) && until.After(now) {
			backoff++
		}
	}
	return map[string]int{"active": q.active.Len(), "backoff": backoff, "parked": q.parked.len(), "waiting": len(q.waiting)}
}
