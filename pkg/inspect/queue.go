package inspect

import (
	"sort"

	corev1 "k8s.io/api/core/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"

	"github.com/gpufabric/gpufabric/pkg/gang/preemption"
	"github.com/gpufabric/gpufabric/pkg/gang/vocab"
)

// groupPriority is a PodGroup's priority as the scheduler ranks it
// (preemption.Resolve): its spec.priority, capped by the lowest priority
// of its pods; the PriorityClass's value, which the scheduler also caps
// by, is not read here (it equals spec.priority unless admission was
// bypassed).
func groupPriority(pg *schedulingv1beta1.PodGroup, members []*corev1.Pod) int32 {
	return preemption.Resolve(pg, nil, members).Priority
}

// queueBefore is the scheduler's queue order (pkg/gang/queue Rank.Before
// with the PodGroup's key): higher priority first, then older, then key.
// Between namespaces of one priority the scheduler also weighs their
// share of its time (in its memory, not in the API): this is the age
// order there.
func queueBefore(a, b *WaitingGang) bool {
	if a.Priority != b.Priority {
		return a.Priority > b.Priority
	}
	if !a.Created.Equal(b.Created) {
		return a.Created.Before(b.Created)
	}
	return vocab.PodGroupKey(a.Namespace, a.Name) < vocab.PodGroupKey(b.Namespace, b.Name)
}

// numberQueue sets each gang's Position by the queue order; the slice keeps
// its order.
func numberQueue(gangs []WaitingGang) {
	order := make([]*WaitingGang, len(gangs))
	for i := range gangs {
		order[i] = &gangs[i]
	}
	sort.SliceStable(order, func(i, j int) bool { return queueBefore(order[i], order[j]) })
	for i, g := range order {
		g.Position = i + 1
	}
}

// queuePlace is the place of namespace/name among the waiting gangs, nil
// when it does not wait.
func queuePlace(waiting []WaitingGang, namespace, name string) *QueuePlace {
	for _, g := range waiting {
		if g.Namespace == namespace && g.Name == name {
			return &QueuePlace{Position: g.Position, Of: len(waiting), Priority: g.Priority, Created: g.Created.UTC()}
		}
	}
	return nil
}
