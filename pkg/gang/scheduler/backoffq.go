package scheduler

import (
	"time"
)

// backoffQueue holds the gangs that an event woke before their backoff
// ended (kube-scheduler's backoffQ): each leaves it for the active queue
// when its backoff ends (a timer), or earlier when the worker finds
// nothing else ready (gangQueue.get). It is guarded by gangQueue.mu.
type backoffQueue struct {
	entries map[string]backoffEntry
	seq     uint64
}

type backoffEntry struct {
	until time.Time
	seq   uint64 // which timer is the entry's
	timer *time.Timer
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
// with nothing ready (and the gang did not error). Called with gq.mu held.
func (gq *gangQueue) toBackoffQ(key string, until time.Time) {
	if gq.idle && gq.q.Len() == 0 && !gq.errored[key] {
		gq.backoffQ.remove(key)
		gq.q.Add(key)
		return
	}
	b := &gq.backoffQ
	if e, ok := b.entries[key]; ok && e.until.Equal(until) {
		return
	}
	b.remove(key)
	b.seq++
	seq := b.seq
	b.entries[key] = backoffEntry{until: until, seq: seq, timer: time.AfterFunc(until.Sub(gq.now()), func() { gq.backoffEnded(key, seq) })}
}

// backoffEnded moves a gang from the backoff queue to the active queue
// when its backoff ends, unless it left the queue meanwhile.
func (gq *gangQueue) backoffEnded(key string, seq uint64) {
	gq.mu.Lock()
	defer gq.mu.Unlock()
	if e, ok := gq.backoffQ.entries[key]; ok && e.seq == seq {
		delete(gq.backoffQ.entries, key)
		gq.q.Add(key)
	}
}
