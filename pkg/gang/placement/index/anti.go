package index

import (
	"fmt"
	"slices"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// AntiTerm is one required pod anti-affinity term, compiled.
type AntiTerm struct {
	selector    labels.Selector
	namespaces  []string // empty with allNS false: the owner's namespace
	allNS       bool
	topologyKey string
	owner       *v1.Pod
}

// matches reports whether the term selects pod q.
func (t *AntiTerm) matches(q *v1.Pod) bool {
	if !t.allNS {
		ns := t.namespaces
		if len(ns) == 0 {
			ns = []string{t.owner.Namespace}
		}
		if !slices.Contains(ns, q.Namespace) {
			return false
		}
	}
	return t.selector.Matches(labels.Set(q.Labels))
}

// sameDomain reports whether two nodes share the term's topology domain;
// a node without the key's label is in no domain.
func (t *AntiTerm) sameDomain(a, b *v1.Node) bool {
	va, ok1 := a.Labels[t.topologyKey]
	vb, ok2 := b.Labels[t.topologyKey]
	return ok1 && ok2 && va == vb
}

// AntiTerms compiles a pod's required anti-affinity terms.
func AntiTerms(p *v1.Pod) ([]*AntiTerm, error) {
	a := p.Spec.Affinity
	if a == nil || a.PodAntiAffinity == nil {
		return nil, nil
	}
	var out []*AntiTerm
	for i, t := range a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution {
		sel, err := metav1.LabelSelectorAsSelector(t.LabelSelector)
		if err != nil {
			return nil, fmt.Errorf("pod %s/%s: anti-affinity term %d: %w", p.Namespace, p.Name, i, err)
		}
		if t.LabelSelector == nil {
			sel = labels.Nothing()
		}
		out = append(out, &AntiTerm{selector: sel, namespaces: t.Namespaces, allNS: t.NamespaceSelector != nil,
			topologyKey: t.TopologyKey, owner: p})
	}
	return out, nil
}

// PodsConflict reports whether pod p (with terms) on node n conflicts with
// pod q (with qTerms) on node m, in either direction.
func PodsConflict(p *v1.Pod, terms []*AntiTerm, n *v1.Node, q *v1.Pod, qTerms []*AntiTerm, m *v1.Node) bool {
	for _, t := range terms {
		if t.sameDomain(n, m) && t.matches(q) {
			return true
		}
	}
	for _, t := range qTerms {
		if t.sameDomain(m, n) && t.matches(p) {
			return true
		}
	}
	return false
}

func hasAntiAffinity(p *v1.Pod) bool {
	a := p.Spec.Affinity
	return a != nil && a.PodAntiAffinity != nil && len(a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution) > 0
}

// antiIndex holds the bound pods' required anti-affinity terms by topology
// key and the label value of their node (a node without it: none apply),
// and the terms it ignored.
type antiIndex struct {
	byKey    map[string]map[string][]*AntiTerm
	warnings []string
}

// add records a bound pod's terms.
func (ai *antiIndex) add(p *v1.Pod, n *v1.Node) []antiAppend {
	terms, err := AntiTerms(p)
	if err != nil {
		ai.warnings = append(ai.warnings, fmt.Sprintf("pod %s/%s: anti-affinity ignored: %v", p.Namespace, p.Name, err))
		return nil
	}
	var appended []antiAppend
	for _, t := range terms {
		v, ok := n.Labels[t.topologyKey]
		if !ok {
			continue
		}
		if ai.byKey == nil {
			ai.byKey = map[string]map[string][]*AntiTerm{}
		}
		if ai.byKey[t.topologyKey] == nil {
			ai.byKey[t.topologyKey] = map[string][]*AntiTerm{}
		}
		appended = append(appended, antiAppend{key: t.topologyKey, value: v, before: len(ai.byKey[t.topologyKey][v])})
		ai.byKey[t.topologyKey][v] = append(ai.byKey[t.topologyKey][v], t)
	}
	return appended
}

// antiAppend is one term add appended: its list, and the list's length
// before.
type antiAppend struct {
	key, value string
	before     int
}

// undo removes what add appended (in reverse).
func (ai *antiIndex) undo(appended []antiAppend) {
	for i := len(appended) - 1; i >= 0; i-- {
		a := appended[i]
		ai.byKey[a.key][a.value] = ai.byKey[a.key][a.value][:a.before]
		if a.before == 0 {
			delete(ai.byKey[a.key], a.value)
		}
		if len(ai.byKey[a.key]) == 0 {
			delete(ai.byKey, a.key)
		}
	}
}

// conflicts is Snapshot.ConflictsWithBound over the snapshot's nodes.
func (ai *antiIndex) conflicts(p *v1.Pod, terms []*AntiTerm, ns *NodeState, nodes []*NodeState) bool {
	for key, byValue := range ai.byKey {
		v, ok := ns.node.Labels[key]
		if !ok {
			continue
		}
		for _, t := range byValue[v] {
			if t.matches(p) {
				return true
			}
		}
	}
	for _, t := range terms {
		candidates := nodes
		if t.topologyKey == v1.LabelHostname {
			candidates = []*NodeState{ns} // hostnames name one node
		}
		for _, other := range candidates {
			if !t.sameDomain(ns.node, other.node) {
				continue
			}
			for _, q := range other.boundPods {
				if t.matches(q) {
					return true
				}
			}
		}
	}
	return false
}
