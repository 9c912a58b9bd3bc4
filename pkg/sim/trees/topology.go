package trees

import (
	"fmt"
	"slices"
)

// Topology is what the tree policies and the metrics see of a fabric.
// Nodes are indexes (the simulator's name order).
type Topology struct {
	// Levels: 0 is the NVLink domain (gpufabric.dev/nvlinkDomain), then
	// the node-label levels, innermost first.
	Levels []string
	// GPUs per node.
	GPUs []int
	// Domains[l] are level l's domains (nodes sorted); DomainOf[l][n] is
	// node n's domain at level l, -1 when none.
	Domains  [][]Domain
	DomainOf [][]int
	// Rails[n][i] is the IB rail of node n's GPU i (in slice order), -1
	// without one.
	Rails [][]int64
}

// Domain is one domain of a level.
type Domain struct {
	ID    string
	Nodes []int
}

// Level returns the index of a level key, -1 when the fabric has none.
func (t *Topology) Level(key string) int { return slices.Index(t.Levels, key) }

// LabelLevel is the level a baseline that reads node labels only (kube-
// scheduler, Kueue) uses for key: key's own level when it is a node-label
// level; for the NVLink domain (not a node label) the node-label level
// whose domains are exactly the NVLink domains (rack, on NVL72 racks),
// else the innermost node-label level (on HGX a rack holds many NVLink
// domains: the baseline cannot ask for one).
func (t *Topology) LabelLevel(key string) (int, error) {
	l := t.Level(key)
	switch {
	case l < 0:
		return 0, fmt.Errorf("topology key %q is not a level of the fabric %v", key, t.Levels)
	case l > 0:
		return l, nil
	case len(t.Levels) < 2:
		return 0, fmt.Errorf("the fabric has no node-label level to stand for %s", key)
	}
	for c := 1; c < len(t.Levels); c++ {
		if t.same(0, c) {
			return c, nil
		}
	}
	return 1, nil
}

// same reports whether levels a and b have the same domains (by nodes).
func (t *Topology) same(a, b int) bool {
	if len(t.Domains[a]) != len(t.Domains[b]) {
		return false
	}
	for _, d := range t.Domains[a] {
		if len(d.Nodes) == 0 {
			continue
		}
		o := t.DomainOf[b][d.Nodes[0]]
		if o < 0 || !slices.Equal(t.Domains[b][o].Nodes, d.Nodes) {
			return false
		}
	}
	return true
}

// Devices tracks which GPUs of each node are taken, by position, for the
// rail metrics: the engine names its devices; the baselines get the
// lowest free positions, as the DRA allocator takes a slice's devices in
// order.
type Devices struct {
	used [][]bool
}

// NewDevices returns the devices of t with busy[n] (positions) taken.
func NewDevices(t *Topology, busy [][]int) *Devices {
	d := &Devices{used: make([][]bool, len(t.GPUs))}
	for n, g := range t.GPUs {
		d.used[n] = make([]bool, g)
		for _, p := range busy[n] {
			if p >= 0 && p < g {
				d.used[n][p] = true
			}
		}
	}
	return d
}

// Lowest takes the k lowest free GPUs of node n.
func (d *Devices) Lowest(n, k int) ([]int, error) {
	var out []int
	for p, u := range d.used[n] {
		if len(out) == k {
			break
		}
		if !u {
			out = append(out, p)
		}
	}
	if len(out) < k {
		return nil, fmt.Errorf("node %d: %d GPUs free, %d taken", n, len(out), k)
	}
	for _, p := range out {
		d.used[n][p] = true
	}
	return out, nil
}

// Take takes the GPUs at positions ps of node n.
func (d *Devices) Take(n int, ps []int) error {
	for i, p := range ps {
		if p < 0 || p >= len(d.used[n]) || d.used[n][p] {
			d.Give(n, ps[:i])
			return fmt.Errorf("node %d: GPU %d is not free", n, p)
		}
		d.used[n][p] = true
	}
	return nil
}

// Give frees the GPUs at positions ps of node n.
func (d *Devices) Give(n int, ps []int) {
	for _, p := range ps {
		if p >= 0 && p < len(d.used[n]) {
			d.used[n][p] = false
		}
	}
}
