package cost

import (
	"container/list"
	"sync"
)

// DefaultGangs is the number of gangs a Memories store holds by default.
const DefaultGangs = 1024

// Memories keeps the Memory of each gang the scheduler tries, at most its
// size of them (the least recently used is dropped first): at most
// size × MaxEntries verdicts in all. Safe for concurrent use; the Memory
// it returns serves one Place call at a time.
type Memories struct {
	mu    sync.Mutex
	size  int
	byKey map[string]*list.Element // gang key → element of lru
	lru   *list.List               // front: most recently used; values *named
}

type named struct {
	key string
	mem *Memory
}

// NewMemories returns an empty store for at most size gangs (0:
// DefaultGangs).
func NewMemories(size int) *Memories {
	if size <= 0 {
		size = DefaultGangs
	}
	return &Memories{size: size, byKey: map[string]*list.Element{}, lru: list.New()}
}

// For returns the gang's Memory, or a new empty one that the store holds
// only once Keep finds something in it: gangs whose attempts remember
// nothing (most) take no room.
func (s *Memories) For(gang string) *Memory {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.byKey[gang]; ok {
		s.lru.MoveToFront(e)
		return e.Value.(*named).mem
	}
	return NewMemory()
}

// Keep stores the gang's Memory after an attempt when it holds verdicts
// (the least recently used gang's is dropped when the store is full), and
// drops the gang's entry when it holds none.
func (s *Memories) Keep(gang string, m *Memory) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.byKey[gang]
	if m == nil || m.Len() == 0 {
		if ok {
			s.lru.Remove(e)
			delete(s.byKey, gang)
		}
		return
	}
	if ok {
		e.Value.(*named).mem = m
		s.lru.MoveToFront(e)
		return
	}
	for s.lru.Len() >= s.size {
		old := s.lru.Back()
		s.lru.Remove(old)
		delete(s.byKey, old.Value.(*named).key)
	}
	s.byKey[gang] = s.lru.PushFront(&named{key: gang, mem: m})
}

// Forget drops the gang's Memory (placed, or gone).
func (s *Memories) Forget(gang string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.byKey[gang]; ok {
		s.lru.Remove(e)
		delete(s.byKey, gang)
	}
}

// Len returns how many gangs have a Memory.
func (s *Memories) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lru.Len()
}
