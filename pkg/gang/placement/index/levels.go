package index

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"

	"github.com/gpufabric/gpufabric/pkg/topology"
)

// levels is a snapshot's levels: the fabric tree's, those grouped by a
// node label on the fly, and the level indexes built so far.
type levels struct {
	tree     *topology.Tree
	allNodes []*v1.Node
	adHoc    map[string]*topology.Level
	// built: level key + "\x00" + class → index.
	built map[string]*LevelIndex
}

// freeCounter counts a node's free devices of a class (Snapshot).
type freeCounter interface {
	freeOn(ctx context.Context, node, class string) (int, error)
}

// classGetter tells whether the snapshot has a DeviceClass (classLister).
type classGetter interface {
	Get(name string) (*resourceapi.DeviceClass, error)
}

var (
	_ freeCounter = (*Snapshot)(nil)
	_ classGetter = classLister{}
)

func newLevels(tree *topology.Tree, nodes []*v1.Node) *levels {
	return &levels{tree: tree, allNodes: nodes, adHoc: map[string]*topology.Level{}, built: map[string]*LevelIndex{}}
}

// forKeys returns the levels a gang is tried at, in order:
//   - with a topology key: that level only, or, when a preferred key names a
//     smaller tree level, the levels from the preferred one up to the key;
//   - without: from the preferred level (or level 0) up to the cluster.
//
// A key that is not a tree level is grouped by node label on the fly.
func (lv *levels) forKeys(key, preferred string) []*topology.Level {
	t := lv.tree
	pref := -1
	var prefLevel *topology.Level
	if preferred != "" {
		prefLevel = lv.level(preferred)
		pref = prefLevel.Index
	}
	if key != "" {
		kl := lv.level(key)
		if kl.Index < 0 || pref < 0 || pref >= kl.Index {
			return []*topology.Level{kl}
		}
		return t.Levels[pref : kl.Index+1]
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
func (lv *levels) level(key string) *topology.Level {
	if l := lv.tree.Level(key); l != nil {
		return l
	}
	if l := lv.adHoc[key]; l != nil {
		return l
	}
	l := lv.tree.NewLabelLevel(key, lv.allNodes)
	lv.adHoc[key] = l
	return l
}

// index returns the level's index for a class, building it on first use.
// With class "" every domain has free 0.
func (lv *levels) index(ctx context.Context, l *topology.Level, class string, fc freeCounter) (*LevelIndex, error) {
	key := l.Key + "\x00" + class
	if li := lv.built[key]; li != nil {
		return li, nil
	}
	li := &LevelIndex{class: class, byNode: map[string]*DomainEntry{}}
	for _, d := range l.Domains {
		e := &DomainEntry{dom: d, hist: map[int]int{}}
		for _, n := range d.Nodes {
			li.byNode[n] = e
			if class == "" {
				continue
			}
			free, err := fc.freeOn(ctx, n, class)
			if err != nil {
				return nil, err
			}
			e.free += free
			e.hist[free]++
		}
		li.entries = append(li.entries, e)
	}
	sort.Slice(li.entries, func(i, j int) bool { return li.entries[i].Before(li.entries[j]) })
	lv.built[key] = li
	return li, nil
}

// sorted returns the built indexes of a class other than "", by key.
func (lv *levels) sorted() []*LevelIndex {
	var out []*LevelIndex
	for _, k := range slices.Sorted(maps.Keys(lv.built)) {
		if li := lv.built[k]; li.class != "" {
			out = append(out, li)
		}
	}
	return out
}

// warm builds the index of every tree level for each class the snapshot
// has (Snapshot.Warm).
func (lv *levels) warm(ctx context.Context, classes []string, have classGetter, fc freeCounter) (int, error) {
	warmed := 0
	for _, class := range classes {
		if _, err := have.Get(class); err != nil {
			continue
		}
		for _, l := range lv.tree.Levels {
			if err := ctx.Err(); err != nil {
				return warmed, fmt.Errorf("warm class %s: %w", class, context.Cause(ctx))
			}
			if _, err := lv.index(ctx, l, class, fc); err != nil {
				return warmed, fmt.Errorf("warm class %s at level %s: %w", class, l.Key, err)
			}
		}
		warmed++
	}
	return warmed, nil
}

// LevelIndex keeps one level's domains sorted by free devices of one class
// (then by id), so the engine finds the best-fit candidates by binary
// search. It changes as Assume and Cache.Update change the snapshot.
type LevelIndex struct {
	class   string
	entries []*DomainEntry
	byNode  map[string]*DomainEntry
}

// DomainEntry is one domain of a LevelIndex with its free devices of the
// index's class.
type DomainEntry struct {
	dom  *topology.Domain
	free int
	// hist counts the domain's nodes by their free devices of the class.
	hist map[int]int
}

// Domain returns the entry's domain.
func (e *DomainEntry) Domain() *topology.Domain { return e.dom }

// Free returns the domain's free devices of the index's class (Unbounded
// per node when a cluster-level pool has devices of the class).
func (e *DomainEntry) Free() int { return e.free }

// PodsBound is an upper bound of how many pods needing need devices each
// fit on the domain's nodes by device counts alone.
func (e *DomainEntry) PodsBound(need int) int {
	if need <= 0 {
		return Unbounded
	}
	n := 0
	for free, nodes := range e.hist {
		n += nodes * (free / need)
	}
	return n
}

// Before is the order of LevelIndex.Entries: fewer free devices first,
// then the smaller domain id.
func (e *DomainEntry) Before(o *DomainEntry) bool {
	if e.free != o.free {
		return e.free < o.free
	}
	return e.dom.ID < o.dom.ID
}

// Len returns how many domains the level has.
func (li *LevelIndex) Len() int { return len(li.entries) }

// Entries returns every domain, in Before order. Callers must not modify
// the slice.
func (li *LevelIndex) Entries() []*DomainEntry { return li.entries }

// From returns the domains with at least need free devices, in Before
// order (best fit first). Callers must not modify the slice.
func (li *LevelIndex) From(need int) []*DomainEntry {
	return li.entries[sort.Search(len(li.entries), func(i int) bool { return li.entries[i].free >= need }):]
}

// Of returns the domain that holds the node, or nil.
func (li *LevelIndex) Of(node string) *DomainEntry { return li.byNode[node] }

// update moves a node's domain after the node's free count changed.
func (li *LevelIndex) update(node string, before, after int) {
	e := li.byNode[node]
	delta := after - before
	if e == nil || delta == 0 {
		return
	}
	if e.hist[before]--; e.hist[before] == 0 {
		delete(e.hist, before)
	}
	e.hist[after]++
	i := sort.Search(len(li.entries), func(i int) bool { return !li.entries[i].Before(e) })
	li.entries = append(li.entries[:i], li.entries[i+1:]...)
	e.free += delta
	j := sort.Search(len(li.entries), func(i int) bool { return !li.entries[i].Before(e) })
	li.entries = append(li.entries, nil)
	copy(li.entries[j+1:], li.entries[j:])
	li.entries[j] = e
}
