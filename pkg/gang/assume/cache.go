package assume

import (
	"sync"

	"k8s.io/apimachinery/pkg/types"

	"github.com/gpufabric/gpufabric/pkg/gang/placement"
)

// Part is one gang's decision in an entry.
type Part struct {
	Gang     *placement.Gang
	Decision *placement.Decision
}

// Entry is one commit's decisions that the informers may not show yet.
type Entry struct {
	Parts []Part
	// InFlight: the commit has not returned; Written is not known yet.
	InFlight bool
	// Written: each written claim's resourceVersion after the commit, by
	// claim UID.
	Written map[types.UID]string
}

// Cache holds the entries by gang key (the package's rules).
type Cache struct {
	mu      sync.Mutex
	entries map[string]*Entry
}

// New returns an empty cache.
func New() *Cache { return &Cache{entries: map[string]*Entry{}} }

// AddInFlight adds the decisions whose commit is about to start.
func (a *Cache) AddInFlight(key string, parts ...Part) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.entries[key] = &Entry{Parts: parts, InFlight: true}
}

// Complete records that the commit of key's entry succeeded with written.
func (a *Cache) Complete(key string, written map[types.UID]string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if e := a.entries[key]; e != nil {
		e.InFlight, e.Written = false, written
	}
}

// Drop removes key's entry (its commit failed and was undone).
func (a *Cache) Drop(key string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.entries, key)
}

// Len counts the entries.
func (a *Cache) Len() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.entries)
}

// Waiting reports whether the gang has an entry the informers do not show
// yet; an entry they show is dropped.
func (a *Cache) Waiting(key string, visible func(*Entry) bool) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	e := a.entries[key]
	if e != nil && !e.InFlight && visible(e) {
		delete(a.entries, key)
		return false
	}
	return e != nil
}

// Pending drops the entries visible says the informers show and returns
// the others.
func (a *Cache) Pending(visible func(*Entry) bool) []*Entry {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []*Entry
	for key, e := range a.entries {
		if !e.InFlight && visible(e) {
			delete(a.entries, key)
			continue
		}
		out = append(out, e)
	}
	return out
}
