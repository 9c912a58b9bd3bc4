package placement

import (
	"errors"
	"fmt"
	"slices"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// ErrUnsupported marks a pod that uses a scheduling feature the engine does
// not model: such a gang is refused with the field named, never placed as
// if the field were not there.
var ErrUnsupported = errors.New("not supported by gpufabric-scheduler")

// CheckPodAntiAffinity counts nodes refused by required pod anti-affinity
// (the member's terms, or an existing pod's terms against the member).
const CheckPodAntiAffinity = "pod anti-affinity"

// CheckVolumeAffinity counts nodes outside a bound volume's node affinity.
const CheckVolumeAffinity = "volume node affinity conflict"

// Unsupported lists the fields of a pod the engine does not model and does
// not ignore: required pod affinity, required anti-affinity terms with a
// namespace selector or match/mismatch label keys, hard topology spread
// constraints, and host ports. Preferred (soft) terms are ignored, as a
// scheduler may. Pure.
func Unsupported(p *v1.Pod) []string {
	var out []string
	if a := p.Spec.Affinity; a != nil {
		if pa := a.PodAffinity; pa != nil && len(pa.RequiredDuringSchedulingIgnoredDuringExecution) > 0 {
			out = append(out, "spec.affinity.podAffinity.requiredDuringSchedulingIgnoredDuringExecution")
		}
		if pa := a.PodAntiAffinity; pa != nil {
			for i, t := range pa.RequiredDuringSchedulingIgnoredDuringExecution {
				f := fmt.Sprintf("spec.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution[%d]", i)
				if t.NamespaceSelector != nil && (len(t.NamespaceSelector.MatchLabels) > 0 || len(t.NamespaceSelector.MatchExpressions) > 0) {
					out = append(out, f+".namespaceSelector")
				}
				if len(t.MatchLabelKeys) > 0 || len(t.MismatchLabelKeys) > 0 {
					out = append(out, f+".matchLabelKeys/mismatchLabelKeys")
				}
			}
		}
	}
	for i, c := range p.Spec.TopologySpreadConstraints {
		if c.WhenUnsatisfiable == v1.DoNotSchedule {
			out = append(out, fmt.Sprintf("spec.topologySpreadConstraints[%d] (whenUnsatisfiable: DoNotSchedule)", i))
		}
	}
	for _, set := range []struct {
		field      string
		containers []v1.Container
	}{{"containers", p.Spec.Containers}, {"initContainers", p.Spec.InitContainers}} {
		for i, c := range set.containers {
			for j, port := range c.Ports {
				if port.HostPort != 0 {
					out = append(out, fmt.Sprintf("spec.%s[%d].ports[%d].hostPort", set.field, i, j))
				}
			}
		}
	}
	return out
}

// antiTerm is one required pod anti-affinity term, compiled.
type antiTerm struct {
	selector    labels.Selector
	namespaces  []string // empty with allNS false: the owner's namespace
	allNS       bool
	topologyKey string
	owner       *v1.Pod
}

// matches reports whether the term selects pod q.
func (t *antiTerm) matches(q *v1.Pod) bool {
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
func (t *antiTerm) sameDomain(a, b *v1.Node) bool {
	va, ok1 := a.Labels[t.topologyKey]
	vb, ok2 := b.Labels[t.topologyKey]
	return ok1 && ok2 && va == vb
}

// antiTerms compiles a pod's required anti-affinity terms.
func antiTerms(p *v1.Pod) ([]*antiTerm, error) {
	a := p.Spec.Affinity
	if a == nil || a.PodAntiAffinity == nil {
		return nil, nil
	}
	var out []*antiTerm
	for i, t := range a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution {
		sel, err := metav1.LabelSelectorAsSelector(t.LabelSelector)
		if err != nil {
			return nil, fmt.Errorf("pod %s/%s: anti-affinity term %d: %w", p.Namespace, p.Name, i, err)
		}
		if t.LabelSelector == nil {
			sel = labels.Nothing()
		}
		out = append(out, &antiTerm{selector: sel, namespaces: t.Namespaces, allNS: t.NamespaceSelector != nil,
			topologyKey: t.TopologyKey, owner: p})
	}
	return out, nil
}

// antiConflict reports whether pod p (with terms) on node n conflicts with
// pod q on node m, in either direction.
func antiConflict(p *v1.Pod, terms []*antiTerm, n *v1.Node, q *v1.Pod, qTerms []*antiTerm, m *v1.Node) bool {
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

// indexAnti records a bound pod's required anti-affinity terms by topology
// key and the value of its node's label (a node without it: none apply).
func (s *Snapshot) indexAnti(p *v1.Pod, n *v1.Node) {
	terms, err := antiTerms(p)
	if err != nil {
		s.antiWarnings = append(s.antiWarnings, fmt.Sprintf("pod %s/%s: anti-affinity ignored: %v", p.Namespace, p.Name, err))
		return
	}
	for _, t := range terms {
		v, ok := n.Labels[t.topologyKey]
		if !ok {
			continue
		}
		if s.antiIndex == nil {
			s.antiIndex = map[string]map[string][]*antiTerm{}
		}
		if s.antiIndex[t.topologyKey] == nil {
			s.antiIndex[t.topologyKey] = map[string][]*antiTerm{}
		}
		s.antiIndex[t.topologyKey][v] = append(s.antiIndex[t.topologyKey][v], t)
	}
}

// antiFailExisting reports whether member mi on ns conflicts with a pod
// already bound: the member's terms against pods in the same topology
// domain, and every bound pod's terms against the member.
func (p *placer) antiFailExisting(mi int, ns *nodeState) bool {
	sh := p.per[mi]
	for key, byValue := range p.s.antiIndex {
		v, ok := ns.node.Labels[key]
		if !ok {
			continue
		}
		for _, t := range byValue[v] {
			if t.matches(sh.pod) {
				return true
			}
		}
	}
	for _, t := range sh.anti {
		nodes := p.s.nodes
		if t.topologyKey == v1.LabelHostname {
			nodes = []*nodeState{ns} // hostnames name one node
		}
		for _, other := range nodes {
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

// antiFailPlaced reports whether member mi on ns conflicts with a member
// the attempt has placed.
func (p *placer) antiFailPlaced(att *attempt, mi int, ns *nodeState) bool {
	sh := p.per[mi]
	for i, qi := range att.members {
		q := p.per[qi]
		if (len(sh.anti) > 0 || len(q.anti) > 0) && antiConflict(sh.pod, sh.anti, ns.node, q.pod, q.anti, att.memberNode[i].node) {
			return true
		}
	}
	return false
}
