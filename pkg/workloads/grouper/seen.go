package grouper

import (
	"container/list"
	"hash/fnv"
	"sync"

	"golang.org/x/time/rate"
)

// maxSeen bounds the messages remembered for deduplication: past it the
// oldest are forgotten (and may be reported once more).
const maxSeen = 16384

// seen remembers the last message reported under each key (a hash), so
// a workload reconciled at every status update of its PodGroups reports
// a message once, not at every reconcile. Bounded, oldest out first.
type seen struct {
	mu    sync.Mutex
	max   int
	order *list.List
	items map[string]*list.Element
}

type seenItem struct {
	key  string
	hash uint64
}

func newSeen(max int) *seen {
	return &seen{max: max, order: list.New(), items: map[string]*list.Element{}}
}

// changed records msg under key and reports whether it differs from the
// last one recorded there.
func (s *seen) changed(key, msg string) bool {
	h := fnv.New64a()
	_, _ = h.Write([]byte(msg))
	sum := h.Sum64()
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.items[key]; ok {
		it := e.Value.(*seenItem)
		s.order.MoveToBack(e)
		if it.hash == sum {
			return false
		}
		it.hash = sum
		return true
	}
	s.items[key] = s.order.PushBack(&seenItem{key: key, hash: sum})
	for s.order.Len() > s.max {
		oldest := s.order.Front()
		s.order.Remove(oldest)
		delete(s.items, oldest.Value.(*seenItem).key)
	}
	return true
}

// forget drops key: its next message is new again.
func (s *seen) forget(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.items[key]; ok {
		s.order.Remove(e)
		delete(s.items, key)
	}
}

// newBucket is the queue's overall rate: 20 reconciles a second, bursts
// of 200 (a flood of workload events costs the apiserver at most that).
func newBucket() *rate.Limiter { return rate.NewLimiter(rate.Limit(20), 200) }
