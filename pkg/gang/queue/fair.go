package queue

import "time"

// fairShare is how much of the one worker's time each namespace's attempts
// used, as start-time fair queuing keeps it (virtual times): a namespace
// is charged what its attempts took (Queue.Charge); among namespaces with
// gangs of the same priority ready, the one charged least goes first. A
// namespace that had no gang ready is brought up to the time of the last
// one served when it gets one, so time spent idle is not credit: a tenant
// whose gangs are dear (slow claims, thousands of gangs that fit nowhere)
// pays with its own turn, and the others' gangs wait at most about as
// long as their own attempts take (docs/design/cost.md). Guarded by
// prioQueue.mu.
type fairShare struct {
	used map[string]time.Duration // namespace → virtual time
	now  time.Duration            // virtual time of the last namespace served
}

func newFairShare() fairShare { return fairShare{used: map[string]time.Duration{}} }

// of returns the namespace's virtual time.
func (f *fairShare) of(ns string) time.Duration { return max(f.used[ns], f.now) }

// activate: the namespace has a gang ready again.
func (f *fairShare) activate(ns string) {
	if f.used[ns] < f.now {
		f.used[ns] = f.now
	}
}

// served: the namespace's gang was handed to the worker.
func (f *fairShare) served(ns string) { f.now = max(f.now, f.used[ns]) }

// charge adds an attempt's worker time to the namespace.
func (f *fairShare) charge(ns string, d time.Duration) {
	if d > 0 {
		f.used[ns] = max(f.used[ns], f.now) + d
	}
}

// idle: the namespace has no gang ready; it is forgotten unless it owes
// time (used past now).
func (f *fairShare) idle(ns string) {
	if f.used[ns] <= f.now {
		delete(f.used, ns)
	}
}

// sweep forgets the namespaces without a gang ready that owe no time any
// more, once they are many: the map holds the namespaces ready or in
// debt, and at most as many others again.
func (f *fairShare) sweep(ready func(ns string) bool, readyCount int) {
	if len(f.used) <= 2*readyCount+64 {
		return
	}
	for ns, u := range f.used {
		if u <= f.now && !ready(ns) {
			delete(f.used, ns)
		}
	}
}
