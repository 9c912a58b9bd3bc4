package sim

import (
	"context"
	"sort"

	"github.com/gpufabric/gpufabric/pkg/sim/trees"
)

// firstFit is kube-scheduler without gangs: every pod on its own, on the
// first node in name order with enough free GPUs. Nothing is
// all-or-nothing; the simulator holds the placed pods of a partial gang.
// A tree job is its pods (Spec.Flat order): the trees' groups, keys and
// rail groups are not seen.
type firstFit struct{}

func (firstFit) Name() string                       { return PolicyFirstFit }
func (firstFit) PodByPod() bool                     { return true }
func (firstFit) Release(context.Context, int) error { return nil }
func (firstFit) Place(_ context.Context, c *Cluster, g TraceGang, nodes []int) ([]int, error) {
	out := append([]int(nil), nodes...)
	used := map[int]int{}
	next, placed := 0, false
	tree, gpus := g.Tree != nil, g.PodGPUs()
	for p := range out {
		if out[p] >= 0 {
			continue
		}
		if tree {
			next = 0 // a tree's pods differ: each from the first node
		}
		for next < len(c.Free) && c.Free[next]-used[next] < gpus[p] {
			next++ // a flat gang's pods are identical: a node too full for one is too full for the next
		}
		if next == len(c.Free) {
			if tree {
				continue
			}
			break
		}
		out[p] = next
		used[next] += gpus[p]
		placed = true
	}
	if !placed {
		return nil, nil
	}
	return out, nil
}

// mostAllocated is kube-scheduler's topology-aware workload scheduling
// with one required node-label key and MostAllocated scoring: the gang goes
// all-or-nothing into one domain of the level; among the domains that fit,
// the one most allocated after placement wins (ties: domain name); each
// pod goes to the most allocated node that fits (ties: node name). A tree
// job is a CompositePodGroup tree placed as kube-scheduler 1.37.1 does
// (trees.Kube), at the tree's own keys.
type mostAllocated struct {
	level int
	key   string
}

func (p mostAllocated) Name() string                     { return PolicyTAS }
func (mostAllocated) PodByPod() bool                     { return false }
func (mostAllocated) Release(context.Context, int) error { return nil }
func (p mostAllocated) Place(_ context.Context, c *Cluster, g TraceGang, nodes []int) ([]int, error) {
	if g.Tree != nil {
		return trees.Kube(c.Fabric.Topo, c.Free, g.Tree)
	}
	best, bestUsed, bestCap := -1, 0, 1
	for di, d := range c.Fabric.Domains[p.level] {
		if d.GPUs == 0 || c.domainPods(d, g.GPUsPerPod) < g.Pods {
			continue
		}
		used := d.GPUs - c.domainFree(d) + g.GPUs()
		if best < 0 || used*bestCap > bestUsed*d.GPUs { // used/GPUs > bestUsed/bestCap
			best, bestUsed, bestCap = di, used, d.GPUs
		}
	}
	if best < 0 {
		return nil, nil
	}
	d := c.Fabric.Domains[p.level][best]
	out := append([]int(nil), nodes...)
	free := map[int]int{}
	for _, i := range d.Nodes {
		free[i] = c.Free[i]
	}
	for pod := range out {
		pick := -1
		for _, i := range d.Nodes {
			if free[i] < g.GPUsPerPod {
				continue
			}
			if pick < 0 || mostAllocatedAfter(c.Fabric.GPUs, free, i, pick, g.GPUsPerPod) {
				pick = i
			}
		}
		out[pod] = pick
		free[pick] -= g.GPUsPerPod
	}
	return out, nil
}

// mostAllocatedAfter reports whether node a is strictly more allocated
// than node b after placing s GPUs on it (MostAllocated scoring).
func mostAllocatedAfter(capacity []int, free map[int]int, a, b, s int) bool {
	return (capacity[a]-free[a]+s)*capacity[b] > (capacity[b]-free[b]+s)*capacity[a]
}

// bestFit is Kueue TAS with the BestFit algorithm and one level: among the
// domains of the level that can hold the gang, the one with the least room
// (pods that fit, then free GPUs, then name); in it, nodes greedily by most
// room, except that the remainder goes to the tightest node that holds it
// all. A tree job is what Kueue can express of it (trees.Kueue): podset
// slices for segments, else one flat group.
type bestFit struct {
	level int
	key   string
}

func (bestFit) Name() string                       { return PolicyBestFit }
func (bestFit) PodByPod() bool                     { return false }
func (bestFit) Release(context.Context, int) error { return nil }
func (p bestFit) Place(_ context.Context, c *Cluster, g TraceGang, nodes []int) ([]int, error) {
	if g.Tree != nil {
		return trees.Kueue(c.Fabric.Topo, c.Free, g.Tree)
	}
	best, bestPods, bestFree := -1, 0, 0
	for di, d := range c.Fabric.Domains[p.level] {
		pods := c.domainPods(d, g.GPUsPerPod)
		if pods < g.Pods {
			continue
		}
		free := c.domainFree(d)
		if best < 0 || pods < bestPods || pods == bestPods && free < bestFree {
			best, bestPods, bestFree = di, pods, free
		}
	}
	if best < 0 {
		return nil, nil
	}
	type room struct{ node, pods int }
	var rooms []room
	for _, i := range c.Fabric.Domains[p.level][best].Nodes {
		if n := c.Free[i] / g.GPUsPerPod; n > 0 {
			rooms = append(rooms, room{i, n})
		}
	}
	sort.SliceStable(rooms, func(a, b int) bool { return rooms[a].pods > rooms[b].pods })
	out := append([]int(nil), nodes...)
	next := 0
	for len(rooms) > 0 && next < len(out) {
		left := len(out) - next
		take, idx := 0, 0 // the largest node, unless one holds the remainder
		for k := len(rooms) - 1; k >= 0; k-- {
			if rooms[k].pods >= left && (take == 0 || rooms[k].pods < take || rooms[k].pods == take && rooms[k].node < rooms[idx].node) {
				take, idx = rooms[k].pods, k
			}
		}
		n := min(left, rooms[idx].pods)
		for range n {
			out[next] = rooms[idx].node
			next++
		}
		rooms = append(rooms[:idx], rooms[idx+1:]...)
	}
	return out, nil
}
