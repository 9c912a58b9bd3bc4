package composite

import (
	"errors"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/types"

	"github.com/gpufabric/gpufabric/pkg/topology"

	"github.com/gpufabric/gpufabric/pkg/gang/placement"
)

// ErrInvalid marks a tree that cannot be placed as it is written (Validate).
var ErrInvalid = errors.New("invalid tree")

// Decision is where a tree goes: each placed leaf's decision and each
// keyed group's domain, in tree order.
type Decision struct {
	Leaves []LeafDecision
	// Domains: the domain each group with a topology key is in (running
	// ones included).
	Domains []GroupDomain
	// Coupled: the tree's rail couplings (coupling.go).
	Coupled []Coupled
	Stats   Stats
}

// LeafDecision is one leaf PodGroup's placement.
type LeafDecision struct {
	Group    *Group
	Decision *placement.Decision
}

// GroupDomain is the domain a group with a topology key is in.
type GroupDomain struct {
	Group       string
	TopologyKey string
	Domain      string
}

// Pods counts the pods the decision places.
func (d *Decision) Pods() int {
	n := 0
	for _, l := range d.Leaves {
		n += len(l.Decision.Pods)
	}
	return n
}

// Summary says where the tree goes, for conditions and events: "<group>
// in <key> <domain>, …" (at most 8 groups named), then each coupling's
// rails.
func (d *Decision) Summary() string {
	var parts []string
	for i, gd := range d.Domains {
		if i == 8 {
			parts = append(parts, fmt.Sprintf("and %d more", len(d.Domains)-i))
			break
		}
		parts = append(parts, fmt.Sprintf("%s in %s %s", gd.Group, gd.TopologyKey, gd.Domain))
	}
	for _, c := range d.Coupled {
		parts = append(parts, c.summary())
	}
	return strings.Join(parts, ", ")
}

// Unschedulable says why a tree was not placed.
type Unschedulable struct {
	// Message names the level and the child that did not fit.
	Message string
	Stats   Stats
}

// Stats are counters of one Place call.
type Stats struct {
	// PlaceCalls: engine Place calls made; PlaceCallsLeft: of the budget.
	PlaceCalls, PlaceCallsLeft int
	// Searches: joint searches run where the greedy order left children
	// out; Nodes: the search's steps.
	Searches, Nodes int
}

// maxWhy bounds one group's refusal in a message.
const maxWhy = 512

// decision turns the stack into a Decision.
func (sr *searcher) decision(root *Group) *Decision {
	d := &Decision{Stats: sr.stats}
	at := map[*Group]*placement.Decision{}
	for _, p := range sr.stack {
		if p.d != nil {
			at[p.g] = p.d
		} else {
			d.Domains = append(d.Domains, GroupDomain{Group: p.g.Name, TopologyKey: p.g.TopologyKey, Domain: p.dom.ID})
		}
	}
	for _, l := range root.leaves() {
		if pd := at[l]; pd != nil {
			d.Leaves = append(d.Leaves, LeafDecision{Group: l, Decision: pd})
		}
	}
	d.Coupled = sr.cp.decided(root, sr.stack, "")
	return d
}

// maxScopesSaid bounds the domains a refusal reports per group.
const maxScopesSaid = 3

// unschedulable is the refusal of the root.
func (sr *searcher) unschedulable(root *Group) *Unschedulable {
	return &Unschedulable{Message: fmt.Sprintf("%s: %s", root.Name, sr.said(root)), Stats: sr.stats}
}

// nothingNew is the refusal of a tree whose groups are placed (their
// members run) but whose waiting members fit nowhere: it names the first
// leaf with members waiting and why.
func (sr *searcher) nothingNew(root *Group) *Unschedulable {
	for _, l := range root.leaves() {
		if l.pending() {
			return &Unschedulable{Message: fmt.Sprintf("%s: no waiting member fits beside the running ones; %s: %s", root.Name, l.Name, cut(sr.said(l))), Stats: sr.stats}
		}
	}
	return &Unschedulable{Message: root.Name + ": no member is waiting", Stats: sr.stats}
}

// said is a group's refusal: in the domains it was tried in, or why it
// was tried in none.
func (sr *searcher) said(g *Group) string {
	if in := sr.whyIn[g]; len(in) > 0 {
		return strings.Join(in, "; ")
	}
	if w := sr.why[g]; w != "" {
		return w
	}
	return "no placement found"
}

// childrenWhy says why a composite's children did not fit in scope: how
// many the greedy order placed against its minGroupCount, and the first
// child left out with its own reason.
func (sr *searcher) childrenWhy(g *Group, kids []*Group, n int, scope *topology.Domain) string {
	var out []string
	for _, k := range kids {
		if sr.cp.missed[k] != "" { // the rail coupling first: a cause the engine cannot name
			out = append(out, fmt.Sprintf("%s: %s", k.Name, cut(sr.cp.missed[k])))
			break
		}
	}
	for _, k := range kids {
		if (sr.why[k] != "" || len(sr.whyIn[k]) > 0) && (len(out) == 0 || sr.said(k) != sr.cp.missed[k]) {
			out = append(out, fmt.Sprintf("%s: %s", k.Name, cut(sr.said(k))))
			break
		}
	}
	head := fmt.Sprintf("%d of %d children fit in %s, minGroupCount %d", n, len(kids), where(scope), g.MinGroupCount)
	if sr.left <= 0 {
		head += " (the search ran out of its budget of Place calls)"
	}
	return strings.Join(append([]string{head}, out...), "; ")
}

// cut bounds a reason.
func cut(s string) string {
	if len(s) <= maxWhy {
		return s
	}
	return s[:maxWhy-3] + "..."
}

// sharedAcrossLeaves says why a tree whose leaves name the same
// unallocated claim cannot be placed ("" when none does): a claim is
// allocated once, by one PodGroup's placement.
func sharedAcrossLeaves(root *Group) string {
	by := map[types.UID]string{}
	for _, l := range root.leaves() {
		seen := map[types.UID]bool{}
		claims := l.Gang.SharedClaims
		for _, m := range l.Gang.Members {
			claims = append(claims[:len(claims):len(claims)], m.Claims...)
		}
		for _, c := range claims {
			if c.Status.Allocation != nil || seen[c.UID] {
				continue
			}
			seen[c.UID] = true
			if other, ok := by[c.UID]; ok {
				return fmt.Sprintf("claim %s is named by %s and %s: a claim that is not allocated yet may be shared inside one PodGroup only (give each PodGroup its own claim, or put the pods in one PodGroup)", c.Name, other, l.Name)
			}
			by[c.UID] = l.Name
		}
	}
	return ""
}
