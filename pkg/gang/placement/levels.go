package placement

import (
	"context"
	"sort"

	"github.com/gpufabric/gpufabric/pkg/topology"
)

// levelsFor returns the levels Place tries, in order:
//   - with a topology key: that level only, or, when a preferred key names a
//     smaller tree level, the levels from the preferred one up to the key;
//   - without: from the preferred level (or level 0) up to the cluster.
//
// A key that is not a tree level is grouped by node label on the fly.
func (s *Snapshot) levelsFor(g *Gang) []*topology.Level {
	t := s.tree
	pref := -1
	var prefLevel *topology.Level
	if g.PreferredTopologyKey != "" {
		prefLevel = s.level(g.PreferredTopologyKey)
		pref = prefLevel.Index
	}
	if g.TopologyKey != "" {
		key := s.level(g.TopologyKey)
		if key.Index < 0 || pref < 0 || pref >= key.Index {
			return []*topology.Level{key}
		}
		return t.Levels[pref : key.Index+1]
	}
	switch {
	case prefLevel == nil:
		return t.Levels
	case pref < 0:
		return append([]*topology.Level{prefLevel}, t.Levels...)
	default:
		return t.Levels[pref:]
	}
}

// level returns the tree level for a key, or a level grouped by that node
// label (Index -1), cached per snapshot.
func (s *Snapshot) level(key string) *topology.Level {
	if l := s.tree.Level(key); l != nil {
		return l
	}
	if l := s.adHoc[key]; l != nil {
		return l
	}
	l := s.tree.NewLabelLevel(key, s.allNodes)
	s.adHoc[key] = l
	return l
}

// levelIndex keeps one level's domains sorted by free devices of one class
// (then by id), so Place finds the best-fit candidates by binary search.
type levelIndex struct {
	level   *topology.Level
	class   string
	entries []*domEntry
	byNode  map[string]*domEntry
}

type domEntry struct {
	dom  *topology.Domain
	free int
	// hist counts the domain's nodes by their free devices of the class.
	hist map[int]int
}

// podsBound is an upper bound of how many pods needing need devices each
// fit on the domain's nodes by device counts alone.
func (e *domEntry) podsBound(need int) int {
	if need <= 0 {
		return unbounded
	}
	n := 0
	for free, nodes := range e.hist {
		n += nodes * (free / need)
	}
	return n
}

func less(a, b *domEntry) bool {
	if a.free != b.free {
		return a.free < b.free
	}
	return a.dom.ID < b.dom.ID
}

// index returns the level's index for a class, building it on first use.
// With class "" every domain has free 0.
func (s *Snapshot) index(ctx context.Context, l *topology.Level, class string) (*levelIndex, error) {
	key := l.Key + "\x00" + class
	if li := s.levels[key]; li != nil {
		return li, nil
	}
	li := &levelIndex{level: l, class: class, byNode: map[string]*domEntry{}}
	for _, d := range l.Domains {
		e := &domEntry{dom: d, hist: map[int]int{}}
		for _, n := range d.Nodes {
			li.byNode[n] = e
			if class == "" {
				continue
			}
			free, err := s.freeDevices(ctx, s.byName[n], class)
			if err != nil {
				return nil, err
			}
			e.free += free
			e.hist[free]++
		}
		li.entries = append(li.entries, e)
	}
	sort.Slice(li.entries, func(i, j int) bool { return less(li.entries[i], li.entries[j]) })
	s.levels[key] = li
	return li, nil
}

// from returns the position of the first domain with at least need free.
func (li *levelIndex) from(need int) int {
	return sort.Search(len(li.entries), func(i int) bool { return li.entries[i].free >= need })
}

// update moves a node's domain after the node's free count changed.
func (li *levelIndex) update(node string, before, after int) {
	e := li.byNode[node]
	delta := after - before
	if e == nil || delta == 0 {
		return
	}
	if e.hist[before]--; e.hist[before] == 0 {
		delete(e.hist, before)
	}
	e.hist[after]++
	i := sort.Search(len(li.entries), func(i int) bool { return !less(li.entries[i], e) })
	li.entries = append(li.entries[:i], li.entries[i+1:]...)
	e.free += delta
	j := sort.Search(len(li.entries), func(i int) bool { return !less(li.entries[i], e) })
	li.entries = append(li.entries, nil)
	copy(li.entries[j+1:], li.entries[j:])
	li.entries[j] = e
}
