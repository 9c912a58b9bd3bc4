package scheduler

import (
	"math/rand/v2"
	"sync"
	"time"

	"k8s.io/client-go/util/workqueue"
)

// gangQueue is the one queue of gangs. Keys are gang keys (see keys.go).
//
// Rules: a key is processed by one worker at a time (workqueue); of the
// ready keys, the highest priority goes first, then the oldest gang. A gang
// that could not be placed is parked: it is not retried before its backoff
// (exponential with jitter) ends, and after that only when a cluster change
// that can help arrives (flushParked) or MaxUnschedulableWait passes; a
// gang parked short of free devices is not woken by a bound pod that
// finished or went (nodeResourcesFreed), only by a change that can free
// devices, and by claims freeing devices only once they freed as many as
// it lacked (devicesFreed). A woken gang whose backoff has not ended waits
// in the backoff queue (backoffq.go), which hands it out early when nothing
// else is ready, as kube-scheduler's SchedulerPopFromBackoffQ does. A gang
// that is not ready (too few members, a claim missing) waits for an event
// about itself or a claim in its namespace. Timers (a not-ready gang's
// settle, a park's MaxUnschedulableWait) act only if the gang is still in
// the state that set them.
type gangQueue struct {
	q workqueue.TypedDelayingInterface[string]
	// order serves ready keys by rank (priority, then age; priority.go).
	order               *prioQueue
	initial, maxBackoff time.Duration
	maxWait             time.Duration
	now                 func() time.Time

	mu       sync.Mutex
	attempts map[string]int
	// parked: unschedulable gangs → end of their backoff.
	parked map[string]time.Time
	// devicesShort: the parked gangs that no domain had enough free devices
	// for: a bound pod's end does not free its devices (its claims stay
	// allocated until they are deallocated, an event of their own), so it
	// does not wake them. Waking them then only cost a refused attempt and
	// a doubled backoff, which held them past the deallocation
	// (docs/benchmarks.md, churn).
	devicesShort map[string]bool
	// short: for each devicesShort gang, how many devices it still lacks
	// (the gang's count less the most free devices a domain had), less
	// the devices claims freed since it was parked.
	short map[string]int
	// backoffQ: woken gangs waiting for their backoff's end (backoffq.go).
	backoffQ backoffQueue
	// errored: gangs backing off after an error (not a refusal); the
	// backoff queue does not hand them out early.
	errored map[string]bool
	// backoff: every gang with a running backoff → its end (parked or not).
	backoff map[string]time.Time
	// waiting: not-ready gangs → namespace.
	waiting map[string]string
	// moves counts flushParked and wakeWaiting calls, so an attempt can
	// tell whether a change that can help arrived while it ran.
	moves uint64
	rnd   *rand.Rand
	// idle: the worker waits in get for a ready gang.
	idle bool
}

func newGangQueue(initial, maxBackoff, maxWait time.Duration) *gangQueue {
	order := newPrioQueue()
	return &gangQueue{
		q: workqueue.NewTypedDelayingQueueWithConfig(workqueue.TypedDelayingQueueConfig[string]{
			Name:  "gangs",
			Queue: workqueue.NewTypedWithConfig(workqueue.TypedQueueConfig[string]{Name: "gangs", Queue: order}),
		}),
		order:        order,
		initial:      initial,
		maxBackoff:   maxBackoff,
		maxWait:      maxWait,
		now:          time.Now,
		attempts:     map[string]int{},
		parked:       map[string]time.Time{},
		devicesShort: map[string]bool{},
		short:        map[string]int{},
		backoffQ:     newBackoffQueue(),
		errored:      map[string]bool{},
		backoff:      map[string]time.Time{},
		waiting:      map[string]string{},
		rnd:          rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 0x9e3779b97f4a7c15)),
	}
}

// add queues a gang after an event about the gang itself. A gang in
// backoff is queued when its backoff ends.
func (gq *gangQueue) add(key string) {
	gq.mu.Lock()
	defer gq.mu.Unlock()
	delete(gq.waiting, key)
	gq.unpark(key)
	gq.addLocked(key)
}

func (gq *gangQueue) unpark(key string) {
	delete(gq.parked, key)
	delete(gq.devicesShort, key)
	delete(gq.short, key)
}

func (gq *gangQueue) addLocked(key string) {
	if until, ok := gq.backoff[key]; ok {
		if until.After(gq.now()) {
			gq.toBackoffQ(key, until)
			return
		}
		delete(gq.backoff, key)
	}
	gq.q.Add(key)
}

// retryAfter queues a gang after d without counting an attempt (conflicts).
func (gq *gangQueue) retryAfter(key string, d time.Duration) { gq.q.AddAfter(key, d) }

// retryWhileWaiting queues a not-ready gang after d if it is still waiting
// then: an event or an attempt that moved it on meanwhile (its members
// arrived and it was refused, say) drops the timer, which would otherwise
// cost that gang an attempt and a doubled backoff for nothing.
func (gq *gangQueue) retryWhileWaiting(key string, d time.Duration) {
	gq.addAfterIf(key, d, func() bool {
		_, ok := gq.waiting[key]
		return ok
	})
}

// addAfterIf queues a gang after d if still (checked then, with gq.mu
// held) reports true; still may change the queue's state for the gang.
func (gq *gangQueue) addAfterIf(key string, d time.Duration, still func() bool) {
	time.AfterFunc(d, func() {
		gq.mu.Lock()
		defer gq.mu.Unlock()
		if still() {
			gq.q.Add(key)
		}
	})
}

// cycle returns the move counter; pass it to park and wait.
func (gq *gangQueue) cycle() uint64 {
	gq.mu.Lock()
	defer gq.mu.Unlock()
	return gq.moves
}

// park records an unschedulable attempt that started at cycle and returns
// the backoff. When a change that can help arrived since the attempt
// started, the gang is retried after the backoff instead of parked.
func (gq *gangQueue) park(key string, cycle uint64) time.Duration {
	gq.mu.Lock()
	defer gq.mu.Unlock()
	gq.attempts[key]++
	d := gq.initial << min(gq.attempts[key]-1, 20)
	if d <= 0 || d > gq.maxBackoff {
		d = gq.maxBackoff
	}
	return gq.parkLocked(key, cycle, d)
}

// parkDevicesShort is park for a gang that no domain had enough free
// devices for, lacking short devices in the domain with the most: while
// parked, nodeResourcesFreed does not wake it, and devicesFreed only once
// claims freed at least short devices (no domain can have gained more).
func (gq *gangQueue) parkDevicesShort(key string, cycle uint64, short int) time.Duration {
	d := gq.park(key, cycle)
	gq.mu.Lock()
	defer gq.mu.Unlock()
	if _, ok := gq.parked[key]; ok {
		gq.devicesShort[key] = true
		gq.short[key] = max(short, 1)
	}
	return d
}

// parkError is park after an error (a failed commit, the engine's error):
// the gang is retried after its backoff, never early.
func (gq *gangQueue) parkError(key string, cycle uint64) time.Duration {
	d := gq.park(key, cycle)
	gq.mu.Lock()
	defer gq.mu.Unlock()
	gq.errored[key] = true
	return d
}

// parkShort parks a gang for the initial backoff without counting an
// attempt: a preempting gang, which waits for its victims to go.
func (gq *gangQueue) parkShort(key string, cycle uint64) time.Duration {
	gq.mu.Lock()
	defer gq.mu.Unlock()
	return gq.parkLocked(key, cycle, gq.initial)
}

func (gq *gangQueue) parkLocked(key string, cycle uint64, d time.Duration) time.Duration {
	// Jitter: 80%..120%.
	d = time.Duration(float64(d) * (0.8 + 0.4*gq.rnd.Float64()))
	until := gq.now().Add(d)
	gq.backoff[key] = until
	delete(gq.devicesShort, key) // parkDevicesShort sets it again
	delete(gq.short, key)
	delete(gq.errored, key) // parkError sets it again
	gq.backoffQ.remove(key)
	delete(gq.waiting, key)
	if gq.moves != cycle {
		gq.toBackoffQ(key, until)
		return d
	}
	gq.parked[key] = until
	// After MaxUnschedulableWait, cluster change or not, if this park is
	// still the gang's last (an earlier park's timer does not count).
	gq.addAfterIf(key, gq.maxWait, func() bool {
		at, ok := gq.parked[key]
		if ok && at.Equal(until) {
			gq.unpark(key)
		}
		return ok && at.Equal(until)
	})
	return d
}

// wait records a not-ready gang whose attempt started at cycle; like park,
// it retries at once when something moved meanwhile.
func (gq *gangQueue) wait(key, namespace string, cycle uint64) {
	gq.mu.Lock()
	defer gq.mu.Unlock()
	if gq.moves != cycle {
		gq.addLocked(key)
		return
	}
	gq.waiting[key] = namespace
}

// forget drops all state of a gang (placed, or gone).
func (gq *gangQueue) forget(key string) {
	gq.mu.Lock()
	defer gq.mu.Unlock()
	delete(gq.attempts, key)
	gq.unpark(key)
	delete(gq.backoff, key)
	delete(gq.waiting, key)
	delete(gq.errored, key)
	gq.backoffQ.remove(key)
}

// flushParked queues every parked gang (when its backoff ends): the cluster
// changed in a way that can help.
func (gq *gangQueue) flushParked() {
	gq.mu.Lock()
	defer gq.mu.Unlock()
	gq.moves++
	for key := range gq.parked {
		gq.unpark(key)
		gq.addLocked(key)
	}
}

// nodeResourcesFreed queues the parked gangs (when their backoff ends)
// that were not short of free devices: a bound pod finished or went.
func (gq *gangQueue) nodeResourcesFreed() {
	gq.mu.Lock()
	defer gq.mu.Unlock()
	gq.moves++
	for key := range gq.parked {
		if !gq.devicesShort[key] {
			gq.unpark(key)
			gq.addLocked(key)
		}
	}
}

// devicesFreed is nodeResourcesFreed for claims that gave up n devices
// (deallocated, or deleted while allocated): it also wakes the gangs parked
// short of devices once claims freed as many devices as they lacked.
func (gq *gangQueue) devicesFreed(n int) {
	gq.mu.Lock()
	defer gq.mu.Unlock()
	gq.moves++
	for key := range gq.parked {
		if gq.devicesShort[key] {
			if gq.short[key] -= n; gq.short[key] > 0 {
				continue
			}
		}
		gq.unpark(key)
		gq.addLocked(key)
	}
}

// wakeWaiting queues the not-ready gangs of a namespace.
func (gq *gangQueue) wakeWaiting(namespace string) {
	gq.mu.Lock()
	defer gq.mu.Unlock()
	gq.moves++
	for key, ns := range gq.waiting {
		if ns == namespace {
			delete(gq.waiting, key)
			gq.addLocked(key)
		}
	}
}

// get hands out the next ready gang, waiting for one. With none ready, it
// takes the woken gang whose backoff ends first (not one that errored)
// from the backoff queue; while it waits, a gang woken into the backoff
// queue is handed out at once (toBackoffQ). Called by the one worker.
func (gq *gangQueue) get() (string, bool) {
	gq.mu.Lock()
	if gq.q.Len() == 0 {
		if key, ok := gq.backoffQ.popEarliest(gq.errored); ok {
			gq.q.Add(key)
		}
	}
	gq.idle = true
	gq.mu.Unlock()
	key, quit := gq.q.Get()
	gq.mu.Lock()
	gq.idle = false
	gq.mu.Unlock()
	return key, quit
}

func (gq *gangQueue) done(key string) { gq.q.Done(key) }
func (gq *gangQueue) shutDown()       { gq.q.ShutDown() }

// counts reports the queue's gangs by state, for the metrics.
func (gq *gangQueue) counts() map[string]int {
	gq.mu.Lock()
	defer gq.mu.Unlock()
	now := gq.now()
	backoff := 0
	for key, until := range gq.backoff {
		if _, parked := gq.parked[key]; !parked && until.After(now) {
			backoff++
		}
	}
	return map[string]int{"active": gq.q.Len(), "backoff": backoff, "parked": len(gq.parked), "waiting": len(gq.waiting)}
}
