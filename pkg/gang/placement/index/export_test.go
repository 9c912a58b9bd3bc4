package index

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// StateDigest describes what placement reads from a snapshot: every node's
// load and allocated devices, the cluster-level allocations, the number of
// anti-affinity terms, and the level indexes named by keys (built on the
// snapshot when missing), in a stable text form for comparisons.
func StateDigest(ctx context.Context, s *Snapshot, keys []string) (string, error) {
	var b strings.Builder
	for _, ns := range s.nodes {
		ids := make([]string, 0, ns.allocated.Len())
		for id := range ns.allocated {
			ids = append(ids, id.String())
		}
		slices.Sort(ids)
		fmt.Fprintf(&b, "node %s idx=%d pods=%d bound=%d req=%v alloc=%v taints=%d unsched=%v\n", ns.node.Name, ns.idx, ns.pods, len(ns.boundPods), sortedRes(ns.requested), ids, len(ns.node.Spec.Taints), ns.node.Spec.Unschedulable)
	}
	for _, pid := range slices.SortedFunc(maps.Keys(s.clusterAllocated), func(a, b poolID) int { return strings.Compare(a.driver+a.pool, b.driver+b.pool) }) {
		ids := make([]string, 0, len(s.clusterAllocated[pid]))
		for _, id := range s.clusterAllocated[pid] {
			ids = append(ids, id.String())
		}
		slices.Sort(ids)
		fmt.Fprintf(&b, "cluster %v %v\n", pid, ids)
	}
	terms := 0
	for _, byValue := range s.anti.byKey {
		for _, ts := range byValue {
			terms += len(ts)
		}
	}
	fmt.Fprintf(&b, "anti terms %d\n", terms)
	for _, key := range keys {
		lkey, class, _ := strings.Cut(key, "\x00")
		li, err := s.LevelIndex(ctx, s.Level(lkey), class)
		if err != nil {
			return "", err
		}
		for _, e := range li.entries {
			fmt.Fprintf(&b, "level %s/%s %s free=%d hist=%v\n", lkey, class, e.dom.ID, e.free, e.hist)
		}
	}
	return b.String(), nil
}

// LevelKeys lists the level indexes a snapshot has built.
func LevelKeys(s *Snapshot) []string { return slices.Sorted(maps.Keys(s.levels.built)) }

func sortedRes(r ResList) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(r)) {
		if r[k] != 0 {
			parts = append(parts, fmt.Sprintf("%s=%d", k, r[k]))
		}
	}
	return strings.Join(parts, ",")
}
