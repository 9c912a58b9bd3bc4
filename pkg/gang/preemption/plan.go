package preemption

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/gpufabric/gpufabric/pkg/gang/placement"
	"github.com/gpufabric/gpufabric/pkg/gang/placement/index"
	"github.com/gpufabric/gpufabric/pkg/topology"
)

// DefaultMaxDomains is Request.MaxDomains' default.
const DefaultMaxDomains = 16

// Request is one preemption question: where, and by evicting what, does
// the preemptor fit? The preemptor is Gang, placed by the engine, or Tree,
// placed by its own Placer.
type Request struct {
	Gang *placement.Gang
	Tree *Tree
	// Priority is the preemptor's.
	Priority int32
	// Input is the cluster as the gang's placement saw it.
	Input index.SnapshotInput
	// Units are the workloads that could be evicted; those of priority
	// Priority or higher are ignored.
	Units []*Unit
	// Budgets: disruptions each PodDisruptionBudget ("<namespace>/<name>")
	// allows now.
	Budgets map[string]int
	// Now dates GPU-time lost.
	Now time.Time
	// MaxDomains bounds the domains evaluated per level (those where the
	// most devices could be freed go first). Default DefaultMaxDomains.
	MaxDomains int
	// Budget bounds the evaluation's wall time (0: none): domains not
	// evaluated in time are skipped, a domain cut short yields no plan.
	Budget time.Duration
}

// Plan says what to evict, and where the gang then goes.
type Plan struct {
	TopologyKey string
	Domain      string
	// Victims in eviction order: those covered by a PodDisruptionBudget
	// first (a refusal then stops the preemption before the others go).
	Victims []*Unit
	// Decision is the placement found with the victims gone (a tree's:
	// every leaf's pods); its nodes are the ones to nominate.
	Decision *placement.Decision
	Cost     Cost
	// Evaluated counts the domains evaluated; Placements the engine runs.
	Evaluated, Placements int
}

// Evaluate returns the cheapest plan, or nil and a sentence saying why
// there is none. Safe for concurrent use with distinct requests.
func Evaluate(ctx context.Context, cfg placement.Config, req Request) (*Plan, string, error) {
	if req.MaxDomains <= 0 {
		req.MaxDomains = DefaultMaxDomains
	}
	who, err := preemptorOf(req)
	if err != nil {
		return nil, "", err
	}
	var units []*Unit
	for _, u := range req.Units {
		if u.Priority < req.Priority && len(u.Pods) > 0 {
			units = append(units, u)
		}
	}
	if len(units) == 0 {
		return nil, fmt.Sprintf("no running workload has a priority below %d", req.Priority), nil
	}
	tree, err := topology.BuildTree(cfg.Index.Tree, req.Input.Nodes, req.Input.ResourceSlices)
	if err != nil {
		return nil, "", fmt.Errorf("build fabric tree: %w", err)
	}
	e := newEvaluator(cfg, req, who, units)
	why := ""
	for _, l := range candidateLevels(tree, who.topologyKey, req.Input) {
		best, reason, err := e.level(ctx, l)
		if err != nil || best != nil {
			return best, "", err
		}
		if why == "" {
			why = reason
		}
		if e.outOfTime() {
			break
		}
	}
	if why == "" {
		why = "no domain holds workloads of lower priority"
	}
	return nil, why, nil
}

// candidateLevels: the preemptor's required level (key), or every level
// from the smallest.
func candidateLevels(tree *topology.Tree, key string, in index.SnapshotInput) []*topology.Level {
	if key != "" {
		if l := tree.Level(key); l != nil {
			return []*topology.Level{l}
		}
		return []*topology.Level{tree.NewLabelLevel(key, in.Nodes)}
	}
	return tree.Levels
}

// evaluator holds one Evaluate call's indexes.
type evaluator struct {
	cfg    placement.Config
	req    Request
	who    preemptor
	start  time.Time
	byNode map[string][]*Unit
	// devices each unit frees; freeOn: unallocated node-local devices per
	// node.
	devices map[*Unit]int
	freeOn  map[string]int
	plan    Plan
}

func newEvaluator(cfg placement.Config, req Request, who preemptor, units []*Unit) *evaluator {
	e := &evaluator{cfg: cfg, req: req, who: who, start: time.Now(), byNode: map[string][]*Unit{}, devices: map[*Unit]int{}}
	claims := make(map[types.UID]*resourceapi.ResourceClaim, len(req.Input.ResourceClaims))
	for _, c := range req.Input.ResourceClaims {
		claims[c.UID] = c
	}
	for _, u := range units {
		seen := sets.New[string]()
		for _, p := range u.Pods {
			if !seen.Has(p.Spec.NodeName) {
				seen.Insert(p.Spec.NodeName)
				e.byNode[p.Spec.NodeName] = append(e.byNode[p.Spec.NodeName], u)
			}
		}
		for _, uid := range u.Claims {
			if c := claims[uid]; c != nil && c.Status.Allocation != nil {
				e.devices[u] += len(c.Status.Allocation.Devices.Results)
			}
		}
	}
	e.freeOn = FreeDevices(req.Input)
	return e
}

// FreeDevices counts each node's node-local devices that no claim has
// allocated.
func FreeDevices(in index.SnapshotInput) map[string]int {
	used := sets.New[string]()
	for _, c := range in.ResourceClaims {
		if a := c.Status.Allocation; a != nil {
			for _, r := range a.Devices.Results {
				used.Insert(r.Driver + "/" + r.Pool + "/" + r.Device)
			}
		}
	}
	free := map[string]int{}
	for _, s := range in.ResourceSlices {
		if s.Spec.NodeName == nil || *s.Spec.NodeName == "" {
			continue
		}
		for _, d := range s.Spec.Devices {
			if !used.Has(s.Spec.Driver + "/" + s.Spec.Pool.Name + "/" + d.Name) {
				free[*s.Spec.NodeName]++
			}
		}
	}
	return free
}

func (e *evaluator) outOfTime() bool {
	return e.req.Budget > 0 && time.Since(e.start) > e.req.Budget
}

// level evaluates the domains of one level that hold victims, the most
// reclaimable devices first, and returns the cheapest plan.
func (e *evaluator) level(ctx context.Context, l *topology.Level) (*Plan, string, error) {
	type cand struct {
		dom   *topology.Domain
		units []*Unit
		room  int
	}
	var cands []cand
	for _, d := range l.Domains {
		if !containsAll(d.Nodes, e.who.boundNodes) {
			continue
		}
		c := cand{dom: d}
		seen := map[*Unit]bool{}
		for _, n := range d.Nodes {
			c.room += e.freeOn[n]
			for _, u := range e.byNode[n] {
				if !seen[u] {
					seen[u] = true
					c.units = append(c.units, u)
					c.room += e.devices[u]
				}
			}
		}
		if len(c.units) > 0 {
			cands = append(cands, c)
		}
	}
	sort.SliceStable(cands, func(i, j int) bool { return cands[i].room > cands[j].room })
	var best *Plan
	why := ""
	for i, c := range cands {
		if i == e.req.MaxDomains || e.outOfTime() {
			break
		}
		p, reason, err := e.domain(ctx, l, c.dom, c.units)
		if err != nil {
			return nil, "", err
		}
		if p != nil && (best == nil || p.Cost.less(best.Cost) || !best.Cost.less(p.Cost) && p.Domain < best.Domain) {
			best = p
		}
		if why == "" {
			why = reason
		}
	}
	if best != nil {
		best.Evaluated, best.Placements = e.plan.Evaluated, e.plan.Placements
	}
	return best, why, nil
}

func containsAll(sorted, want []string) bool {
	for _, w := range want {
		if i := sort.SearchStrings(sorted, w); i == len(sorted) || sorted[i] != w {
			return false
		}
	}
	return true
}

// firstLine is the first line of an engine message.
func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}
