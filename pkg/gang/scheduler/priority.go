package scheduler

import (
	"container/heap"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
)

// Priorities, as kube-scheduler 1.37 resolves them:
//   - a PodGroup's priority is spec.priority (the Priority admission plugin
//     sets it from spec.priorityClassName, or the global default class, and
//     refuses any other value); when it is unset (admission plugin off)
//     gpufabric takes the lowest priority of the pods given, where
//     kube-scheduler takes 0;
//   - a pod's is spec.priority, 0 when unset;
//   - a PodGroup's preemption policy is spec.preemptionPolicy when set, else
//     Never when a member says Never, else PreemptLowerPriority.

// podPriority is a pod's priority.
func podPriority(p *v1.Pod) int32 {
	if p.Spec.Priority != nil {
		return *p.Spec.Priority
	}
	return 0
}

// podGroupPriority is a PodGroup's priority; members are used only when
// spec.priority is unset.
func podGroupPriority(pg *schedulingv1beta1.PodGroup, members []*v1.Pod) int32 {
	if pg.Spec.Priority != nil {
		return *pg.Spec.Priority
	}
	if len(members) == 0 {
		return 0
	}
	low := podPriority(members[0])
	for _, p := range members[1:] {
		low = min(low, podPriority(p))
	}
	return low
}

// mayPreempt reports whether a gang may preempt lower-priority workloads.
func mayPreempt(pg *schedulingv1beta1.PodGroup, members []*v1.Pod) bool {
	if pg != nil && pg.Spec.PreemptionPolicy != nil {
		return *pg.Spec.PreemptionPolicy != schedulingv1beta1.PreemptNever
	}
	for _, p := range members {
		if p.Spec.PreemptionPolicy != nil && *p.Spec.PreemptionPolicy == v1.PreemptNever {
			return false
		}
	}
	return true
}

// rank orders the gang queue: higher priority first, then older gangs
// (creation time), then the key.
type rank struct {
	priority int32
	since    time.Time
}

// before reports whether a (with key ka) is served before b (key kb).
func (a rank) before(ka string, b rank, kb string) bool {
	if a.priority != b.priority {
		return a.priority > b.priority
	}
	if !a.since.Equal(b.since) {
		return a.since.Before(b.since)
	}
	return ka < kb
}

// rankOf returns a gang's rank from the informers; unknown gangs (deleted,
// or not seen yet) rank as priority 0, created now.
func (s *Scheduler) rankOf(key string) rank {
	isGroup, ns, name := splitKey(key)
	if !isGroup {
		p, err := s.pods.Pods(ns).Get(name)
		if err != nil {
			return rank{since: time.Now()}
		}
		return rank{priority: podPriority(p), since: p.CreationTimestamp.Time}
	}
	pg, err := s.podGroups.PodGroups(ns).Get(name)
	if err != nil {
		return rank{since: time.Now()}
	}
	var members []*v1.Pod
	if pg.Spec.Priority == nil {
		if ms, err := s.members(pg); err == nil {
			members = ms.pending
		}
	}
	return rank{priority: podGroupPriority(pg, members), since: pg.CreationTimestamp.Time}
}

// prioQueue is the gang queue's order (a workqueue.Queue): a heap by rank.
// The rank of a key is read when it is pushed or touched; reorder reads
// all again. Safe for concurrent use.
type prioQueue struct {
	mu    sync.Mutex
	rankf func(string) rank
	h     rankHeap
}

func newPrioQueue() *prioQueue {
	return &prioQueue{rankf: func(string) rank { return rank{} }, h: rankHeap{index: map[string]int{}}}
}

// setRank sets the rank function and re-reads every queued key's rank.
func (q *prioQueue) setRank(f func(string) rank) {
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
	rank rank
}

// rankHeap is a container/heap of keys, first in rank order at the top.
type rankHeap struct {
	items []rankItem
	index map[string]int
}

func (h *rankHeap) Len() int { return len(h.items) }
func (h *rankHeap) Less(i, j int) bool {
	return h.items[i].rank.before(h.items[i].key, h.items[j].rank, h.items[j].key)
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
