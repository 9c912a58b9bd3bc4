package queue

import (
	"container/heap"
	"sync"
	"time"
)

// Rank orders the active queue: higher priority first, then older gangs
// (creation time), then the key.
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

// prioQueue is the active queue's order (a workqueue.Queue): a heap by
// rank. The rank of a key is read when it is pushed or touched; reorder
// reads all again. Safe for concurrent use.
type prioQueue struct {
	mu    sync.Mutex
	rankf RankFunc
	h     rankHeap
}

func newPrioQueue() *prioQueue {
	return &prioQueue{rankf: func(string) Rank { return Rank{} }, h: rankHeap{index: map[string]int{}}}
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
	for i := range q.h.items {
		q.h.items[i].rank = q.rankf(q.h.items[i].key)
	}
	heap.Init(&q.h)
}

func (q *prioQueue) Touch(key string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if i, ok := q.h.index[key]; ok {
		q.h.items[i].rank = q.rankf(key)
		heap.Fix(&q.h, i)
	}
}

func (q *prioQueue) Push(key string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	heap.Push(&q.h, rankItem{key: key, rank: q.rankf(key)})
}

func (q *prioQueue) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.h.Len()
}

func (q *prioQueue) Pop() string {
	q.mu.Lock()
	defer q.mu.Unlock()
	return heap.Pop(&q.h).(rankItem).key
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
