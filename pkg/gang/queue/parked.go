package queue

import "time"

// parkedSet holds the unschedulable gangs (kube-scheduler's
// unschedulablePods): each waits for a cluster change that can help, or
// for MaxUnschedulableWait. Guarded by Queue.mu.
type parkedSet struct {
	// until: parked gang → end of its backoff.
	until map[string]time.Time
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
}

func newParkedSet() parkedSet {
	return parkedSet{until: map[string]time.Time{}, devicesShort: map[string]bool{}, short: map[string]int{}}
}

func (p *parkedSet) has(key string) bool { _, ok := p.until[key]; return ok }
func (p *parkedSet) len() int            { return len(p.until) }

// remove unparks a gang.
func (p *parkedSet) remove(key string) {
	delete(p.until, key)
	p.clearShort(key)
}

// clearShort drops a gang's devices-short mark.
func (p *parkedSet) clearShort(key string) {
	delete(p.devicesShort, key)
	delete(p.short, key)
}

// Park records an unschedulable attempt that started at cycle and returns
// the backoff. When a change that can help arrived since the attempt
// started, the gang is retried after the backoff instead of parked.
func (q *Queue) Park(key string, cycle uint64) time.Duration {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.attempts[key]++
	d := q.initial << min(q.attempts[key]-1, 20)
	if d <= 0 || d > q.maxBackoff {
		d = q.maxBackoff
	}
	return q.parkLocked(key, cycle, d)
}

// ParkDevicesShort is Park for a gang that no domain had enough free
// devices for, lacking short devices in the domain with the most: while
// parked, NodeResourcesFreed does not wake it, and DevicesFreed only once
// claims freed at least short devices (no domain can have gained more).
func (q *Queue) ParkDevicesShort(key string, cycle uint64, short int) time.Duration {
	d := q.Park(key, cycle)
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.parked.has(key) {
		q.parked.devicesShort[key] = true
		q.parked.short[key] = max(short, 1)
	}
	return d
}

// ParkError is Park after an error (a failed commit, the engine's error):
// the gang is retried after its backoff, never early.
func (q *Queue) ParkError(key string, cycle uint64) time.Duration {
	d := q.Park(key, cycle)
	q.mu.Lock()
	defer q.mu.Unlock()
	q.errored[key] = true
	return d
}

// TimedOutWeight is how many attempts a timed-out attempt counts for in
// the backoff (each one multiplies it by 2^TimedOutWeight, not 2), and
// TimedOutMaxFactor how far past MaxBackoff it may grow.
const (
	TimedOutWeight    = 3
	TimedOutMaxFactor = 6
)

// ParkTimedOut is ParkError for a gang whose attempt spent its placement
// budget or whose claims ran out of time: it backs off harder — the
// attempt counts TimedOutWeight times, and the backoff may grow to
// TimedOutMaxFactor × MaxBackoff — and is never handed out early, so that
// a tenant's expensive gang costs the worker at most its budget per
// backoff.
func (q *Queue) ParkTimedOut(key string, cycle uint64) time.Duration {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.attempts[key] += TimedOutWeight
	limit := TimedOutMaxFactor * q.maxBackoff
	d := q.initial << min(q.attempts[key]-1, 20)
	if d <= 0 || d > limit {
		d = limit
	}
	d = q.parkLocked(key, cycle, d)
	q.errored[key] = true
	return d
}

// ParkShort parks a gang for the initial backoff without counting an
// attempt: a preempting gang, which waits for its victims to go.
func (q *Queue) ParkShort(key string, cycle uint64) time.Duration {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.parkLocked(key, cycle, q.initial)
}

func (q *Queue) parkLocked(key string, cycle uint64, d time.Duration) time.Duration {
	// Jitter: 80%..120%.
	d = time.Duration(float64(d) * (0.8 + 0.4*q.rnd.Float64()))
	until := q.clock.Now().Add(d)
	q.backoff[key] = until
	q.parked.clearShort(key) // ParkDevicesShort sets it again
	delete(q.errored, key)   // ParkError sets it again
	q.backoffQ.remove(key)
	delete(q.waiting, key)
	if q.moves != cycle {
		q.toBackoffQ(key, until)
		q.payWakeLocked(key)
		return d
	}
	q.parked.until[key] = until
	// After MaxUnschedulableWait, cluster change or not, if this park is
	// still the gang's last (an earlier park's timer does not count).
	q.addAfterIf(key, q.maxWait, func() bool {
		at, ok := q.parked.until[key]
		if ok && at.Equal(until) {
			q.parked.remove(key)
		}
		return ok && at.Equal(until)
	})
	q.payWakeLocked(key)
	return d
}

// FlushParked queues every parked gang (when its backoff ends): the
// cluster changed in a way that can help.
func (q *Queue) FlushParked() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.flushParkedLocked("")
}

// flushParkedLocked is FlushParked with q.mu held, sparing the gang
// except ("" for none).
func (q *Queue) flushParkedLocked(except string) {
	q.moves++
	for key := range q.parked.until {
		if key != except {
			q.parked.remove(key)
			q.addLocked(key)
		}
	}
}

// NodeResourcesFreed queues the parked gangs (when their backoff ends)
// that were not short of free devices: a bound pod finished or went.
func (q *Queue) NodeResourcesFreed() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.moves++
	for key := range q.parked.until {
		if !q.parked.devicesShort[key] {
			q.parked.remove(key)
			q.addLocked(key)
		}
	}
}

// DevicesFreed is NodeResourcesFreed for claims that gave up n devices
// (deallocated, or deleted while allocated): it also wakes the gangs
// parked short of devices once claims freed as many devices as they
// lacked.
func (q *Queue) DevicesFreed(n int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.moves++
	for key := range q.parked.until {
		if q.parked.devicesShort[key] {
			if q.parked.short[key] -= n; q.parked.short[key] > 0 {
				continue
			}
		}
		q.parked.remove(key)
		q.addLocked(key)
	}
}
