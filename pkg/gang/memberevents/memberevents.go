package memberevents

import (
	"fmt"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpufabric/gpufabric/pkg/gang/report"
	"github.com/gpufabric/gpufabric/pkg/gang/vocab"
)

// PerChange bounds the events one change of a gang's waiting
// reason or message sends to its members. Events go through the
// scheduler's own client (its rate limit is the one commits use) and the
// events broadcaster's queue of 1,000, which drops what overflows: a
// 10,000-pod gang told member by member would take the API rate its commit
// needs and push every other event out of the queue. Every waiting member
// carries the same message in its PodScheduled condition anyway; the event
// is what `kubectl describe pod` shows under Events, so a gang of up to
// this many members has one on each, a bigger one on this many. Measured
// (BenchmarkMemberEventsTell, a 10,000-pod gang, a new note each time):
// 0.2 ms and 156 KB of the worker's time per change at 50, against 83 ms
// and 41 MB telling every member (and 10,000 events for a queue of 1,000).
const PerChange = 50

// Refresh: a gang whose reason and message did not change is
// told again after this long (the apiserver's event TTL is an hour by
// default, after which `describe` would show none).
const Refresh = 30 * time.Minute

// noteMessageMax bounds the PodGroup's message quoted in a member's
// event; the PodGroup's condition and its own events carry it whole.
const noteMessageMax = 256

// Note is what a waiting gang's members are told: the event type and
// reason, and the PodGroup's reason and message.
type Note struct {
	EventType, Reason string
	// Why is the PodGroup's condition reason; Message its message.
	Why, Message string
}

// Events records one event per waiting member of a PodGroup gang
// that points to the PodGroup's reason. Safe for concurrent use.
//
// Rules: a member gets an event when its gang's note changed, or when the
// same note is older than Refresh; never again for the same
// note otherwise, however often the gang is retried. Each note reaches at
// most PerChange members (first come), so the memory and the
// events of a gang are bounded whatever its size. Recording never blocks
// (report.Reporter).
type Events struct {
	report *report.Reporter
	mu     sync.Mutex
	gangs  map[string]*round
}

// New returns the Events that record through r (nil: none).
func New(r *report.Reporter) *Events { return &Events{report: r} }

// round is one note of a gang and the members told it.
type round struct {
	note  Note
	since time.Time
	told  map[types.UID]bool
}

// pick returns the pods of the gang key that get an event for note at
// now, and records them as told.
func (m *Events) pick(key string, note Note, pods []*v1.Pod, now time.Time) []*v1.Pod {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.gangs == nil {
		m.gangs = map[string]*round{}
	}
	r := m.gangs[key]
	if r == nil || r.note != note || now.Sub(r.since) >= Refresh {
		r = &round{note: note, since: now, told: map[types.UID]bool{}}
		m.gangs[key] = r
	}
	var out []*v1.Pod
	for _, p := range pods {
		if len(r.told) >= PerChange {
			break
		}
		if p == nil || p.Spec.NodeName != "" || r.told[p.UID] {
			continue
		}
		r.told[p.UID] = true
		out = append(out, p)
	}
	return out
}

// tell records note's event on the members of pg (gang key) that pick
// chooses.
func (m *Events) Tell(key string, pg *schedulingv1beta1.PodGroup, note Note, pods []*v1.Pod) {
	if m == nil || pg == nil {
		return
	}
	picked := m.pick(key, note, pods, time.Now())
	if len(picked) == 0 {
		return
	}
	text := eventNote(pg, note)
	for _, p := range picked {
		m.report.Event(p, note.EventType, note.Reason, "Scheduling", text)
	}
}

// forget drops what was told to the members of a gang that is done.
func (m *Events) Forget(key string) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.gangs, key)
}

// eventNote says a member waits for its gang, why (cut short), and
// where to read more. It names only the PodGroup, in the pod's namespace.
func eventNote(pg *schedulingv1beta1.PodGroup, note Note) string {
	return fmt.Sprintf("waiting with its gang, PodGroup %s: %s: %s; see `kubectl gpufabric explain %s -n %s` or the PodGroup's condition %s",
		pg.Name, note.Why, report.Truncate(note.Message, noteMessageMax), pg.Name, pg.Namespace, vocab.ConditionInitiallyScheduled)
}
