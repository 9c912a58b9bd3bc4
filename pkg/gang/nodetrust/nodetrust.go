// Package nodetrust tells the cluster's admin about the nodes the fabric
// tree refuses (topology.CheckNodeDomain: a node whose ResourceSlices
// declare an NVLink domain its admin-owned label contradicts, or that
// lacks a required one): a Warning event on the Node naming the
// contradiction, and a log line. The tree itself leaves such nodes out of
// every domain, so nothing is placed on them; this room only reports.
//
// Rules: bounded and deduplicated. A node is told once per reason, and at
// most once per MinInterval even when its reason keeps changing (a node
// flipping the domain it claims cannot flood events); at most
// MaxEventsPerTree events go out per tree (the rest at the next tree); a
// tree already seen costs nothing; what it remembers is bounded by the
// refused nodes. It imports the vocabulary and the event reporter, never
// the loop.
//
// Files: nodetrust.go (Reporter).
package nodetrust

import (
	"context"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/klog/v2"

	"github.com/gpufabric/gpufabric/pkg/gang/report"
	"github.com/gpufabric/gpufabric/pkg/gang/vocab"
	"github.com/gpufabric/gpufabric/pkg/topology"
)

// Bounds of a Reporter.
const (
	MaxEventsPerTree = 32
	MinInterval      = 10 * time.Minute
)

// Events records events (report.Reporter).
type Events interface {
	Event(obj runtime.Object, eventType, reason, action, note string)
}

var _ Events = (*report.Reporter)(nil)

// Reporter reports refused nodes. Create with New; safe for concurrent
// use.
type Reporter struct {
	events Events
	node   func(name string) (*v1.Node, error)
	now    func() time.Time

	mu   sync.Mutex
	last *topology.Tree
	told map[string]told
}

type told struct {
	reason string
	at     time.Time
}

// New returns a Reporter that reads Nodes with node (a lister's Get) and
// records through events. now nil is time.Now.
func New(events Events, node func(name string) (*v1.Node, error), now func() time.Time) *Reporter {
	if now == nil {
		now = time.Now
	}
	return &Reporter{events: events, node: node, now: now, told: map[string]told{}}
}

// Observe reports the tree's refused nodes not told yet (see the rules).
func (r *Reporter) Observe(ctx context.Context, tree *topology.Tree) {
	if r == nil || tree == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if tree == r.last {
		return
	}
	r.last = tree
	logger := klog.FromContext(ctx)
	refused := make(map[string]bool, len(tree.Refused))
	sent, later := 0, 0
	now := r.now()
	for _, ref := range tree.Refused {
		refused[ref.Node] = true
		prev, seen := r.told[ref.Node]
		if seen && (prev.reason == ref.Reason || now.Sub(prev.at) < MinInterval) {
			continue
		}
		if sent >= MaxEventsPerTree {
			later++
			continue
		}
		n, err := r.node(ref.Node)
		if err != nil {
			continue // gone; the next tree will not name it
		}
		logger.Info("Node refused for placement", "node", klog.KObj(n), "declared", ref.Declared, "adminLabel", ref.Admin, "reason", ref.Reason)
		r.events.Event(n, v1.EventTypeWarning, vocab.EventNodeFabricRefused, "Placing",
			ref.Reason+"; gpufabric-scheduler places nothing on this node until they agree (docs/topology-labels.md)")
		r.told[ref.Node] = told{reason: ref.Reason, at: now}
		sent++
	}
	for name := range r.told {
		if !refused[name] {
			delete(r.told, name)
			logger.Info("Node no longer refused for placement", "node", klog.KRef("", name))
		}
	}
	if later > 0 {
		logger.Info("More nodes refused for placement than one tree reports; the rest are told with the next tree", "refused", len(tree.Refused), "told", sent, "later", later)
	}
}
