package queue

import (
	"time"

	"k8s.io/utils/clock"
)

// backoffQueue holds the gangs that an event woke before their backoff
// ended (kube-scheduler's backoffQ): each leaves it for the active queue
// when its backoff ends (a timer), or earlier when the worker finds
// nothing else ready (Queue.Get). It is guarded by Queue.mu.
type backoffQueue struct {
	entries map[string]backoffEntry
	seq     uint64
}

type backoffEntry struct {
	until time.Time
	seq   uint64 // which timer is the entry's
	timer clock.Timer
}

func newBackoffQueue() backoffQueue { return backoffQueue{entries: map[string]backoffEntry{}} }

// remove drops a gang's entry and stops its timer.
func (b *backoffQueue) remove(key string) {
	if e, ok := b.entries[key]; ok {
		e.timer.Stop()
		delete(b.entries, key)
	}
}

// popEarliest removes and returns the gang whose backoff ends first (then
// the smallest key), skipping the gangs in skip.
func (b *backoffQueue) popEarliest(skip map[string]bool) (string, bool) {
	best, found := "", false
	for key, e := range b.entries {
		if skip[key] {
			continue
		}
		if !found || e.until.Before(b.entries[best].until) || e.until.Equal(b.entries[best].until) && key < best {
			best, found = key, true
		}
	}
	if found {
		b.remove(best)
	}
	return best, found
}

// toBackoffQ puts a woken gang whose backoff ends at until into the
// backoff queue, or straight into the active queue when the worker waits
// with nothing ready (and the gang did not error). Called with q.mu held.
func (q *Queue) toBackoffQ(key string, until time.Time) {
	if q.idle && q.active.Len() == 0 && !q.errored[key] {
		q.backoffQ.remove(key)
		q.active.Add(key)
		return
	}
	b := &q.backoffQ
	if e, ok := b.entries[key]; ok && e.until.Equal(until) {
		return
	}
	b.remove(key)
	b.seq++
	seq := b.seq
	b.entries[key] = backoffEntry{until: until, seq: seq, timer: q.clock.AfterFunc(until.Sub(q.clock.Now()), func() { q.backoffEnded(key, seq) })}
}

// backoffEnded moves a gang from the backoff queue to the active queue
// when its backoff ends, unless it left the queue meanwhile.
func (q *Queue) backoffEnded(key string, seq uint64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if e, ok := q.backoffQ.entries[key]; ok && e.seq == seq {
		delete(q.backoffQ.entries, key)
		q.active.Add(key)
	}
}

// RetryConflict queues a gang whose commit lost a race (a conflict) after
// its conflict backoff and returns it: ConflictBackoff, doubled with each
// conflict since the gang was last forgotten, up to MaxBackoff, with
// jitter. Like a gang that errored it waits its backoff out in the backoff
// queue (an event about it does not end the wait early), and it wakes no
// other gang: the devices its decision had assumed are probably its own
// again at its retry. Only when that retry ends parked (it did not take
// them back) are the other parked gangs woken, once (payWakeLocked).
func (q *Queue) RetryConflict(key string) time.Duration {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.conflicts[key]++
	d := q.conflictBackoff << min(q.conflicts[key]-1, 20)
	if d <= 0 || d > q.maxBackoff {
		d = max(q.maxBackoff, q.conflictBackoff)
	}
	d = time.Duration(float64(d) * (0.8 + 0.4*q.rnd.Float64()))
	until := q.clock.Now().Add(d)
	q.backoff[key] = until
	q.errored[key] = true // never handed out early
	q.owesWake[key] = true
	q.parked.remove(key)
	delete(q.waiting, key)
	q.toBackoffQ(key, until)
	return d
}

// payWakeLocked wakes the other parked gangs once after a gang whose
// commit conflicted was parked: the devices its decision had assumed, and
// that may have refused them, are free. Called with q.mu held.
func (q *Queue) payWakeLocked(key string) {
	if q.owesWake[key] {
		delete(q.owesWake, key)
		q.flushParkedLocked(key)
	}
}
