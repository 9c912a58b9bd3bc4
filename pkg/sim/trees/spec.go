package trees

import (
	"fmt"

	"github.com/gpufabric/gpufabric/pkg/topology"
)

// Kinds of tree jobs.
const (
	// KindTraining is a segmented training job: a composite whose children
	// are segments (leaves of one size), each in one domain of a lower
	// level (the NVLink domain), all in one domain of the root's level.
	KindTraining = "training"
	// KindInference is a disaggregated inference service: a frontend, a
	// prefill gang and a decode gang in one domain of the root's level;
	// prefill and decode share a rail group.
	KindInference = "inference"
)

// Roles of leaves. Segment leaves are counted by "segments in one
// domain"; the others name an inference service's parts.
const (
	RoleSegment  = "segment"
	RoleFrontend = "frontend"
	RolePrefill  = "prefill"
	RoleDecode   = "decode"
)

// Bounds on what a trace may hold (a trace is read from a file).
const (
	// MaxDepth is the deepest tree (as Kubernetes 1.37: three composite
	// levels and the PodGroups below them).
	MaxDepth = 4
	// MaxChildren bounds a composite's children.
	MaxChildren = 64
	// MaxPods bounds a tree's pods and MaxGPUsPerPod a pod's GPUs.
	MaxPods       = 4096
	MaxGPUsPerPod = 64
)

// Spec is a tree job in a trace: a composite (Children) or a leaf (Pods
// identical pods of GPUsPerPod GPUs, none for a CPU-only pod). A tree is
// placed whole or not at all: every composite needs all its children
// (minGroupCount = children), every leaf all its pods.
type Spec struct {
	// Kind, at the root only: KindTraining or KindInference.
	Kind string `json:"kind,omitempty"`
	// Name is unique in the tree.
	Name string `json:"name"`
	// TopologyKey is the level the group's pods share one domain of: a
	// level of the fabric (gpufabric.dev/nvlinkDomain or a node label such
	// as leaf); "": inside its parent's.
	TopologyKey string `json:"topologyKey,omitempty"`
	// Children of a composite, in creation order (kube-scheduler places
	// them in that order).
	Children []Spec `json:"children,omitempty"`
	// Pods and GPUsPerPod of a leaf.
	Pods       int `json:"pods,omitempty"`
	GPUsPerPod int `json:"gpusPerPod,omitempty"`
	// Role of a leaf (RoleSegment, RoleFrontend, RolePrefill, RoleDecode).
	Role string `json:"role,omitempty"`
	// RailGroup couples leaves: the leaves of one composite with the same
	// rail group ask for one IB rail set (prefill rail i ↔ decode rail i).
	// A composite has at most one rail group among its children.
	RailGroup string `json:"railGroup,omitempty"`
	// RailCoupling, on a composite: how its children's rail group asks,
	// CouplingRequired ("": the same) or CouplingPreferred (as
	// gpufabric.dev/rail-coupling).
	RailCoupling string `json:"railCoupling,omitempty"`
}

// How a rail group asks (Spec.RailCoupling): the values of the annotation
// gpufabric.dev/rail-coupling.
const (
	CouplingRequired  = topology.RailCouplingRequired
	CouplingPreferred = topology.RailCouplingPreferred
)

// Leaf reports whether s is a leaf.
func (s *Spec) Leaf() bool { return len(s.Children) == 0 }

// Pod is one pod of a tree in flattened order: leaves in tree order, each
// leaf's pods in index order.
type Pod struct {
	// Leaf indexes Leaves().
	Leaf int
	GPUs int
}

// Leaves lists the tree's leaves in tree order.
func (s *Spec) Leaves() []*Spec {
	if s.Leaf() {
		return []*Spec{s}
	}
	var out []*Spec
	for i := range s.Children {
		out = append(out, s.Children[i].Leaves()...)
	}
	return out
}

// Flat lists the tree's pods in flattened order.
func (s *Spec) Flat() []Pod {
	var out []Pod
	for li, l := range s.Leaves() {
		for range l.Pods {
			out = append(out, Pod{Leaf: li, GPUs: l.GPUsPerPod})
		}
	}
	return out
}

// GPUs is the tree's total.
func (s *Spec) GPUs() int {
	n := 0
	for _, l := range s.Leaves() {
		n += l.Pods * l.GPUsPerPod
	}
	return n
}

// Validate checks a tree read from a trace: a known kind at the root, at
// most MaxDepth levels, at most MaxChildren children per composite, unique
// names, leaves with 1..MaxPods pods of 0..MaxGPUsPerPod GPUs, at most
// MaxPods pods in all and at least one GPU.
func (s *Spec) Validate() error {
	if s.Kind != KindTraining && s.Kind != KindInference {
		return fmt.Errorf("tree %q: kind %q, want %s or %s", s.Name, s.Kind, KindTraining, KindInference)
	}
	seen := map[string]bool{}
	pods := 0
	var walk func(g *Spec, depth int) error
	walk = func(g *Spec, depth int) error {
		switch {
		case depth > MaxDepth:
			return fmt.Errorf("%s: deeper than %d levels", g.Name, MaxDepth)
		case g.Name == "" || seen[g.Name]:
			return fmt.Errorf("group %q: a name must be set and unique in the tree", g.Name)
		case depth > 1 && g.Kind != "":
			return fmt.Errorf("%s: kind is set on the root only", g.Name)
		case len(g.Children) > MaxChildren:
			return fmt.Errorf("%s: %d children, at most %d", g.Name, len(g.Children), MaxChildren)
		}
		seen[g.Name] = true
		if !g.Leaf() {
			if g.Pods != 0 || g.GPUsPerPod != 0 || g.Role != "" || g.RailGroup != "" {
				return fmt.Errorf("%s: a composite has no pods, role or rail group", g.Name)
			}
			if err := g.validCoupling(); err != nil {
				return err
			}
			for i := range g.Children {
				if err := walk(&g.Children[i], depth+1); err != nil {
					return err
				}
			}
			return nil
		}
		if g.RailCoupling != "" {
			return fmt.Errorf("%s: railCoupling is set on a composite", g.Name)
		}
		if g.Pods < 1 || g.Pods > MaxPods || g.GPUsPerPod < 0 || g.GPUsPerPod > MaxGPUsPerPod {
			return fmt.Errorf("%s: %d pods of %d GPUs, want 1..%d pods of 0..%d GPUs", g.Name, g.Pods, g.GPUsPerPod, MaxPods, MaxGPUsPerPod)
		}
		pods += g.Pods
		return nil
	}
	if err := walk(s, 1); err != nil {
		return fmt.Errorf("tree %q: %w", s.Name, err)
	}
	if pods > MaxPods || s.GPUs() == 0 {
		return fmt.Errorf("tree %q: %d pods and %d GPUs, want at most %d pods and a GPU", s.Name, pods, s.GPUs(), MaxPods)
	}
	return nil
}

// Keys lists the topology keys the tree names, in tree order, once each.
func (s *Spec) Keys() []string {
	var out []string
	seen := map[string]bool{}
	var walk func(g *Spec)
	walk = func(g *Spec) {
		if g.TopologyKey != "" && !seen[g.TopologyKey] {
			seen[g.TopologyKey] = true
			out = append(out, g.TopologyKey)
		}
		for i := range g.Children {
			walk(&g.Children[i])
		}
	}
	walk(s)
	return out
}

// validCoupling checks a composite's rail coupling: a known value, at
// most one rail group among its children.
func (s *Spec) validCoupling() error {
	if s.RailCoupling != "" && s.RailCoupling != CouplingRequired && s.RailCoupling != CouplingPreferred {
		return fmt.Errorf("%s: railCoupling %q, want %s or %s", s.Name, s.RailCoupling, CouplingRequired, CouplingPreferred)
	}
	group := ""
	for _, c := range s.Children {
		if c.RailGroup != "" && group != "" && c.RailGroup != group {
			return fmt.Errorf("%s: children in rail groups %s and %s: at most one per composite", s.Name, group, c.RailGroup)
		}
		if c.RailGroup != "" {
			group = c.RailGroup
		}
	}
	return nil
}

// Coupled reports whether s (a composite) couples its children's rails,
// and how: CouplingRequired or CouplingPreferred.
func (s *Spec) Coupled() (string, bool) {
	for _, c := range s.Children {
		if c.RailGroup != "" && c.Leaf() {
			if s.RailCoupling == "" {
				return CouplingRequired, true
			}
			return s.RailCoupling, true
		}
	}
	return "", false
}
