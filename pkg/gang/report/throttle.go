package report

import (
	"sync"
	"time"
)

// Throttle bounds how often a gang writes a status that repeats while it
// waits: at most once per Interval per key, and only once the gang's member
// count held still for Settle (members still being created). Its zero
// Interval and Settle mean no limit. Safe for concurrent use; a key is kept
// until Forget.
type Throttle struct {
	Interval, Settle time.Duration

	mu      sync.Mutex
	last    map[string]time.Time
	members map[string]memberCount
}

type memberCount struct {
	n     int
	since time.Time
}

// Settled reports whether a gang's member count n has held still for
// Settle at now (recording n when it changed); else how long until it has.
func (w *Throttle) Settled(key string, n int, now time.Time) (bool, time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.members == nil {
		w.members = map[string]memberCount{}
	}
	mc, ok := w.members[key]
	if !ok || mc.n != n {
		mc = memberCount{n: n, since: now}
		w.members[key] = mc
	}
	if d := w.Settle - now.Sub(mc.since); d > 0 {
		return false, d
	}
	return true, 0
}

// Due reports whether key may write now and, if so, records now; else it
// returns how long until it may.
func (w *Throttle) Due(key string, now time.Time) (bool, time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.last == nil {
		w.last = map[string]time.Time{}
	}
	if t, ok := w.last[key]; ok && now.Sub(t) < w.Interval {
		return false, w.Interval - now.Sub(t)
	}
	w.last[key] = now
	return true, 0
}

// Forget drops what the throttle holds of key.
func (w *Throttle) Forget(key string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.last, key)
	delete(w.members, key)
}
