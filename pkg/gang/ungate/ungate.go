package ungate

import (
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/gpufabric/gpufabric/pkg/gang/podstate"
)

// Times holds, per gang key, when the gang's last gate went. Set KeyOf
// before the first call; the zero value of the rest is ready.
type Times struct {
	// KeyOf is the key of a pod's gang (queue.KeyOf).
	KeyOf func(*v1.Pod) string
	// Now is the clock; time.Now when nil.
	Now func() time.Time

	mu sync.Mutex
	at map[string]time.Time
}

// Added notes a pod an informer adds whose gates went unseen.
func (u *Times) Added(p *v1.Pod) {
	if waiting(p) && gatedCondition(p) {
		u.note(u.KeyOf(p))
	}
}

// Updated notes a pod whose last gate this update removed.
func (u *Times) Updated(old, p *v1.Pod) {
	if len(old.Spec.SchedulingGates) > 0 && waiting(p) {
		u.note(u.KeyOf(p))
	}
}

func (u *Times) note(key string) {
	now := time.Now
	if u.Now != nil {
		now = u.Now
	}
	t := now()
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.at == nil {
		u.at = map[string]time.Time{}
	}
	if t.After(u.at[key]) {
		u.at[key] = t
	}
}

// Take returns and forgets key's time (the zero time when none).
func (u *Times) Take(key string) time.Time {
	u.mu.Lock()
	defer u.mu.Unlock()
	t := u.at[key]
	delete(u.at, key)
	return t
}

// At returns key's time (the zero time when none).
func (u *Times) At(key string) time.Time {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.at[key]
}

// Forget drops key's time.
func (u *Times) Forget(key string) { u.Take(key) }

// Len is the number of gangs with a time.
func (u *Times) Len() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return len(u.at)
}

// waiting: a pod of ours, unbound, not deleting, without gates.
func waiting(p *v1.Pod) bool {
	return podstate.Ours(p) && p.Spec.NodeName == "" && p.DeletionTimestamp == nil && len(p.Spec.SchedulingGates) == 0
}

// gatedCondition: the pod's PodScheduled condition says SchedulingGated.
func gatedCondition(p *v1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == v1.PodScheduled {
			return c.Status == v1.ConditionFalse && c.Reason == v1.PodReasonSchedulingGated
		}
	}
	return false
}

// Later is the later of two times (the zero time counts as earliest).
func Later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
