package evict

import (
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	schedulingv1alpha3 "k8s.io/api/scheduling/v1alpha3"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpufabric/gpufabric/pkg/gang/preemption"
	"github.com/gpufabric/gpufabric/pkg/gang/vocab"
)

// rankTTL is how long the queue's rank of a PodGroup reuses its resolved
// priority: the rank is read at every event about the gang's pods, and
// resolving reads all of them (a 10,000-pod gang would cost O(n²) while
// its pods are created).
const rankTTL = time.Second

// maxRemembered bounds the gangs Priorities remembers (ranks, notes told):
// past it, what it remembers is dropped and rebuilt on demand.
const maxRemembered = 16384

// Priorities resolves gangs' effective priorities and preemption policies
// from the informers (preemption.Resolve: a PodGroup's PriorityClass and
// its pods) for the loop, and tells a PodGroup when its priority was
// capped: one event per change of that note, never again while the gang
// waits. Safe for concurrent use.
type Priorities struct {
	cfg   *Config
	mu    sync.Mutex
	told  map[string]string // gang key -> note last told
	ranks map[string]rankEntry
}

type rankEntry struct {
	uid      types.UID
	at       time.Time
	priority int32
}

// NewPriorities returns the loop's priority resolver over cfg's listers.
func NewPriorities(cfg Config) *Priorities {
	return &Priorities{cfg: &cfg, told: map[string]string{}, ranks: map[string]rankEntry{}}
}

// Group resolves a PodGroup from the informers now.
func (p *Priorities) Group(pg *schedulingv1beta1.PodGroup) preemption.Effective {
	e := resolveGroup(p.cfg, pg)
	p.remember(vocab.PodGroupKey(pg.Namespace, pg.Name), rankEntry{uid: pg.UID, at: time.Now(), priority: e.Priority})
	return e
}

// Tree resolves a CompositePodGroup tree from the informers now: its
// root's priority and policy, capped by the root's PriorityClass and by
// every pod of its leaves (preemption.ResolveTree). A tree is valued so
// both as a preemptor and as a victim.
func (p *Priorities) Tree(root *schedulingv1alpha3.CompositePodGroup, leaves []*schedulingv1beta1.PodGroup) preemption.Effective {
	e := resolveTree(p.cfg, root, leaves)
	p.remember(vocab.CompositeKey(root.Namespace, root.Name), rankEntry{uid: root.UID, at: time.Now(), priority: e.Priority})
	return e
}

// TreeRank is a tree's priority for the queue's order: Tree's (capped as
// its preemption is), resolved at most rankTTL ago; leaves lists its leaf
// PodGroups, read only when no recent rank is remembered.
func (p *Priorities) TreeRank(root *schedulingv1alpha3.CompositePodGroup, leaves func() []*schedulingv1beta1.PodGroup) int32 {
	if prio, ok := p.recent(vocab.CompositeKey(root.Namespace, root.Name), root.UID); ok {
		return prio
	}
	return p.Tree(root, leaves()).Priority
}

// Rank is a PodGroup's priority for the queue's order: Group's, resolved
// at most rankTTL ago.
func (p *Priorities) Rank(pg *schedulingv1beta1.PodGroup) int32 {
	if prio, ok := p.recent(vocab.PodGroupKey(pg.Namespace, pg.Name), pg.UID); ok {
		return prio
	}
	return p.Group(pg).Priority
}

// recent is the priority remembered for key's object uid, when resolved
// less than rankTTL ago.
func (p *Priorities) recent(key string, uid types.UID) (int32, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	r, ok := p.ranks[key]
	if ok && r.uid == uid && time.Since(r.at) < rankTTL {
		return r.priority, true
	}
	return 0, false
}

// Tell records an event on the PodGroup when its priority was capped,
// once per note (a refusal's condition also says it: AfterRefusal).
func (p *Priorities) Tell(pg *schedulingv1beta1.PodGroup, e preemption.Effective) {
	note := e.Capped
	key := vocab.PodGroupKey(pg.Namespace, pg.Name)
	p.mu.Lock()
	if p.told[key] == note {
		p.mu.Unlock()
		return
	}
	if len(p.told) >= maxRemembered {
		clear(p.told)
	}
	p.told[key] = note
	p.mu.Unlock()
	if note != "" {
		p.cfg.Report.Event(pg, v1.EventTypeWarning, vocab.EventPriorityCapped, "Scheduling", schedulerName+": "+note)
	}
}

// Forget drops what was remembered of a gang that is done.
func (p *Priorities) Forget(key string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.told, key)
	delete(p.ranks, key)
}

func (p *Priorities) remember(key string, r rankEntry) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.ranks) >= maxRemembered {
		clear(p.ranks)
	}
	p.ranks[key] = r
}

// resolveGroup resolves a PodGroup with its PriorityClass (none when the
// lister is unset or the class is gone) and all the pods naming it.
func resolveGroup(cfg *Config, pg *schedulingv1beta1.PodGroup) preemption.Effective {
	var class *schedulingv1.PriorityClass
	if cfg.PriorityClasses != nil && pg.Spec.PriorityClassName != "" {
		class, _ = cfg.PriorityClasses.Get(pg.Spec.PriorityClassName)
	}
	var pods []*v1.Pod
	if cfg.Gangs != nil {
		pods, _ = cfg.Gangs.GroupPods(pg.Namespace, pg.Name)
	}
	return preemption.Resolve(pg, class, pods)
}

// resolveTree resolves a tree with its root's PriorityClass and all the
// pods naming its leaves.
func resolveTree(cfg *Config, root *schedulingv1alpha3.CompositePodGroup, leaves []*schedulingv1beta1.PodGroup) preemption.Effective {
	var class *schedulingv1.PriorityClass
	if cfg.PriorityClasses != nil && root.Spec.PriorityClassName != "" {
		class, _ = cfg.PriorityClasses.Get(root.Spec.PriorityClassName)
	}
	var pods []*v1.Pod
	if cfg.Gangs != nil {
		for _, pg := range leaves {
			members, _ := cfg.Gangs.GroupPods(pg.Namespace, pg.Name)
			pods = append(pods, members...)
		}
	}
	return preemption.ResolveTree(root, class, pods)
}
