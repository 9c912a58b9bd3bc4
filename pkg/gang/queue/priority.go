package queue

import (
	"container/heap"
	"sync"
	"time"
)

// Rank orders a namespace's gangs in the active queue: higher priority
// first, then older gangs (creation time), then the key. Between
// namespaces, the fair share of the worker's time comes after the
// priority (prioQueue).
type Rank struct {
	Priority int32
	Since    time.Time
}

// Before reports whether a (with key ka) is served before b (key kb).
func (a Rank) Before(ka string, b Rank, kb string) bool {
	if a.Priority != b.Priority {
		return a.Priority > b.Priority
	}
	if !a.Since.Equal(b.Since) {
		return a.Since.Before(b.Since)
	}
	return ka < kb
}

// RankFunc returns a gang's rank. It is called with the active queue's
// locks held (see the lock order in doc.go): it may read listers, never
// call the queue.
type RankFunc func(key string) Rank

// prioQueue is the active queue's order (a workqueue.Queue): one heap by
// rank per namespace, and between namespaces the fair share of the
// worker's time (fair.go): of the namespaces whose first key has the
// highest priority, the one whose attempts used the least worker time is
// served first, then by its first key's rank. The rank of a key is read
// when it is pushed or touched; reorder reads all again. Safe for
// concurrent use.
type prioQueue struct {
	mu    sync.Mutex
	rankf RankFunc
	byNS  map[string]*rankHeap // namespace → its queued keys
	nsOf  map[string]string    // queued key → namespace
	fair  fairShare
}

func newPrioQueue() *prioQueue {
	return &prioQueue{rankf: func(string) Rank { return Rank{} }, byNS: map[string]*rankHeap{}, nsOf: map[string]string{}, fair: newFairShare()}
}

// setRank sets the rank function and re-reads every queued key's rank.
func (q *prioQueue) setRank(f RankFunc) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.rankf = f
	q.reorderLocked()
}

// reorder re-reads every queued key's rank.
func (q *prioQueue) reorder() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.reorderLocked()
}

func (q *prioQueue) reorderLocked() {
	for _, h := range q.byNS {
		for i := range h.items {
			h.items[i].rank = q.rankf(h.items[i].key)
		}
		heap.Init(h)
	}
}

// charge adds an attempt's worker time to its gang's namespace.
func (q *prioQueue) charge(key string, d time.Duration) {
	q.mu.Lock()
	defer q.mu.Unlock()
	_, ns, _ := SplitKey(key)
	q.fair.charge(ns, d)
}

func (q *prioQueue) Touch(key string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	h := q.byNS[q.nsOf[key]]
	if h == nil {
		return
	}
	if i, ok := h.index[key]; ok {
		h.items[i].rank = q.rankf(key)
		heap.Fix(h, i)
	}
}

func (q *prioQueue) Push(key string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	_, ns, _ := SplitKey(key)
	h := q.byNS[ns]
	if h == nil {
		h = &rankHeap{index: map[string]int{}}
		q.byNS[ns] = h
		q.fair.activate(ns)
	}
	q.nsOf[key] = ns
	heap.Push(h, rankItem{key: key, rank: q.rankf(key)})
}

func (q *prioQueue) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.nsOf)
}

// Pop serves the namespace whose first key has the highest priority, then
// the one that used the least worker time, then the one whose first key
// ranks first; the order is total, so it does not depend on map order.
func (q *prioQueue) Pop() string {
	q.mu.Lock()
	defer q.mu.Unlock()
	best, found := "", false
	for ns, h := range q.byNS {
		if !found || q.before(ns, h, best, q.byNS[best]) {
			best, found = ns, true
		}
	}
	h := q.byNS[best]
	key := heap.Pop(h).(rankItem).key
	delete(q.nsOf, key)
	q.fair.served(best)
	if h.Len() == 0 {
		delete(q.byNS, best)
		q.fair.idle(best)
	}
	q.fair.sweep(func(ns string) bool { return q.byNS[ns] != nil }, len(q.byNS))
	return key
}

// before reports whether namespace a (its keys ha) is served before b.
func (q *prioQueue) before(a string, ha *rankHeap, b string, hb *rankHeap) bool {
	ra, rb := ha.items[0], hb.items[0]
	if ra.rank.Priority != rb.rank.Priority {
		return ra.rank.Priority > rb.rank.Priority
	}
	if ua, ub := q.fair.of(a), q.fair.of(b); ua != ub {
		return ua < ub
	}
	return ra.rank.Before(ra.key, rb.rank, rb.key)
}

type rankItem struct {
	key  string
	rank Rank
}

// rankHeap is a container/heap of keys, first in rank order at the top.
type rankHeap struct {
	items []rankItem
	index map[string]int
}

func (h *rankHeap) Len() int { return len(h.items) }
func (h *rankHeap) Less(i, j int) bool {
	return h.items[i].rank.Before(h.items[i].key, h.items[j].rank, h.items[j].key)
}
func (h *rankHeap) Swap(i, j int) {
	h.items[i], h.items[j] = h.items[j], h.items[i]
	h.index[h.items[i].key] = i
	h.index[h.items[j].key] = j
}
func (h *rankHeap) Push(x any) {
	it := x.(rankItem)
	h.index[it.key] = len(h.items)
	h.items = append(h.items, it)
}
func (h *rankHeap) Pop() any {
	last := h.items[len(h.items)-1]
	h.items = h.items[:len(h.items)-1]
	delete(h.index, last.key)
	return last
}
