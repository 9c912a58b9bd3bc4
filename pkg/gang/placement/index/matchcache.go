package index

import (
	"sync"

	"k8s.io/apimachinery/pkg/types"
)

// MatchCache remembers which devices of a ResourceSlice match a
// DeviceClass across snapshots, so a new snapshot does not evaluate CEL
// again for unchanged slices. Entries are keyed by the slice's UID and
// resourceVersion and the class's name and resourceVersion; an entry that
// no snapshot used since the previous NewSnapshot is dropped. Safe for
// concurrent use. The zero value is not usable; call NewMatchCache.
type MatchCache struct {
	mu        sync.Mutex
	cur, prev map[matchKey][]bool
}

type matchKey struct {
	slice     types.UID
	sliceRV   string
	sliceName string
	class     string
	classRV   string
}

// NewMatchCache returns an empty cache.
func NewMatchCache() *MatchCache {
	return &MatchCache{cur: map[matchKey][]bool{}, prev: map[matchKey][]bool{}}
}

// rotate starts a new generation: entries of the one before are dropped.
func (c *MatchCache) rotate() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.prev, c.cur = c.cur, map[matchKey][]bool{}
}

func (c *MatchCache) get(k matchKey) ([]bool, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if v, ok := c.cur[k]; ok {
		return v, true
	}
	if v, ok := c.prev[k]; ok {
		c.cur[k] = v
		return v, true
	}
	return nil, false
}

func (c *MatchCache) put(k matchKey, v []bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.cur[k] = v
}
