package trees

import (
	"fmt"
	"slices"
	"testing"

	"github.com/gpufabric/gpufabric/pkg/topology"
)

// node is one node of a test topology: its GPUs and its domain id at each
// level (Levels order).
type node struct {
	gpus int
	at   []string
}

// topoOf builds a Topology of levels from nodes (index = position); rails
// are the GPU indexes.
func topoOf(levels []string, nodes []node) *Topology {
	t := &Topology{Levels: levels}
	for range levels {
		t.Domains = append(t.Domains, nil)
		t.DomainOf = append(t.DomainOf, make([]int, len(nodes)))
	}
	for n, nd := range nodes {
		t.GPUs = append(t.GPUs, nd.gpus)
		rails := make([]int64, nd.gpus)
		for i := range rails {
			rails[i] = int64(i)
		}
		t.Rails = append(t.Rails, rails)
		for l, id := range nd.at {
			d := slices.IndexFunc(t.Domains[l], func(d Domain) bool { return d.ID == id })
			if d < 0 {
				d = len(t.Domains[l])
				t.Domains[l] = append(t.Domains[l], Domain{ID: id})
			}
			t.Domains[l][d].Nodes = append(t.Domains[l][d].Nodes, n)
			t.DomainOf[l][n] = d
		}
	}
	return t
}

// rack is a rack of nodes of gpus GPUs in a leaf.
type rack struct {
	id, leaf    string
	nodes, gpus int
}

// racksOf is an NVL72-like topology: each rack one NVLink domain (levels
// nvlinkDomain, rack, leaf); nodes are <rack>-n<i>, in rack order.
func racksOf(racks ...rack) (*Topology, []string) {
	var nodes []node
	var names []string
	for _, r := range racks {
		for i := range r.nodes {
			nodes = append(nodes, node{gpus: r.gpus, at: []string{r.id, r.id, r.leaf}})
			names = append(names, fmt.Sprintf("%s-n%d", r.id, i))
		}
	}
	return topoOf([]string{topology.TopologyKeyNVLinkDomain, "rack", "leaf"}, nodes), names
}

// freeOf is every node's GPUs free but busy (name → busy GPUs).
func freeOf(t *Topology, names []string, busy map[string]int) []int {
	free := append([]int(nil), t.GPUs...)
	for n, b := range busy {
		free[slices.Index(names, n)] -= b
	}
	return free
}

// named turns node indexes into names ("" for -1); nil stays nil.
func named(names []string, nodes []int) []string {
	if nodes == nil {
		return nil
	}
	out := make([]string, len(nodes))
	for i, n := range nodes {
		if n >= 0 {
			out[i] = names[n]
		}
	}
	return out
}

// leafSpec is a leaf.
func leafSpec(name, key string, pods, gpus int) Spec {
	return Spec{Name: name, TopologyKey: key, Pods: pods, GPUsPerPod: gpus}
}

// repeat is n copies of s.
func repeat(s string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = s
	}
	return out
}

func mustValid(t *testing.T, s *Spec) *Spec {
	t.Helper()
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	return s
}
