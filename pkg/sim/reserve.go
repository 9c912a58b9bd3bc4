package sim

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/gpufabric/gpufabric/pkg/gang/placement"
	"github.com/gpufabric/gpufabric/pkg/gang/placement/index"
	"github.com/gpufabric/gpufabric/pkg/gang/preemption"
)

// DefaultStarvationBound is gpufabric-reserve's bound: 30 minutes.
const DefaultStarvationBound = 1800

// Ticker is a Policy that looks at the waiting gangs before each pass of
// the queue (gpufabric-reserve: who is past the starvation bound).
type Ticker interface {
	Tick(ctx context.Context, now int64, waiting []TraceGang) error
}

// simStarvation is the engine policy's reservations, with the same rules
// as the scheduler's (pkg/gang/preemption): a gang that waited past the
// bound holds the domain closest to fitting it; another gang may use that
// domain only when its run time (here its trace duration, as a user's
// activeDeadlineSeconds that is exact) ends before the domain's shadow.
type simStarvation struct {
	now   int64
	holds map[int]*simHold
	// ends of running gangs (start + duration) and their GPUs per node.
	ends     map[int]int64
	variants map[string]*index.Snapshot
}

type simHold struct {
	res      *preemption.Reservation
	nodes    sets.Set[string]
	shadow   time.Time
	shadowOK bool
}

func newSimStarvation() *simStarvation {
	return &simStarvation{holds: map[int]*simHold{}, ends: map[int]int64{}, variants: map[string]*index.Snapshot{}}
}

// invalidate drops the snapshots without held nodes (a rebuild, or the
// holds changed). Safe on nil.
func (st *simStarvation) invalidate() {
	if st != nil {
		clear(st.variants)
	}
}

func (st *simStarvation) ended(id int) {
	if st != nil {
		delete(st.ends, id)
	}
}

// started records a placed gang: its end, and the end of its hold.
func (e *EnginePolicy) started(g TraceGang) {
	st := e.starve
	if st == nil {
		return
	}
	st.ends[g.ID] = st.now + g.Duration
	if _, ok := st.holds[g.ID]; ok {
		delete(st.holds, g.ID)
		st.invalidate()
	}
}

// reservingEngine is the engine policy with a starvation bound: the only
// engine policy that is a Ticker.
type reservingEngine struct{ *EnginePolicy }

var _ Ticker = reservingEngine{}

// Tick reserves domains for the gangs past the bound, in queue order, and
// refreshes every hold's shadow.
func (r reservingEngine) Tick(ctx context.Context, now int64, waiting []TraceGang) error {
	e := r.EnginePolicy
	st := e.starve
	if st == nil {
		return nil
	}
	st.now = now
	if _, err := e.Sync(ctx); err != nil {
		return err
	}
	for _, g := range waiting {
		if now-g.Arrival < e.Starvation || st.holds[g.ID] != nil || g.Tree != nil {
			continue // a tree job holds nothing (the scheduler's reservations are per gang)
		}
		gang, err := e.gang(g)
		if err != nil {
			return err
		}
		held := sets.New[string]()
		for _, h := range st.holds {
			held = held.Union(h.nodes)
		}
		res, err := preemption.ClosestDomain(ctx, e.cfg, preemption.WithoutNodes(e.in, held), gang, 0)
		if err != nil {
			return fmt.Errorf("reserve for gang %d: %w", g.ID, err)
		}
		if res != nil {
			st.holds[g.ID] = &simHold{res: res, nodes: sets.New(res.Nodes...)}
			st.invalidate()
		}
	}
	free := preemption.FreeDevices(e.in)
	for _, h := range st.holds {
		n := 0
		for node := range h.nodes {
			n += free[node]
		}
		h.shadow, h.shadowOK = preemption.Shadow(time.Unix(now, 0), h.res.Need, n, e.releases(h.nodes))
	}
	return nil
}

// releases: the running gangs' pods on nodes, freed at their gang's end.
func (e *EnginePolicy) releases(nodes sets.Set[string]) []preemption.Release {
	var out []preemption.Release
	for id, b := range e.running {
		end, ok := e.starve.ends[id]
		if !ok {
			continue
		}
		for _, p := range b.pods {
			if nodes.Has(p.Spec.NodeName) {
				out = append(out, preemption.Release{At: time.Unix(end, 0), Devices: podGPUs(b, p.Name)})
			}
		}
	}
	return out
}

// podGPUs counts the devices of a running pod's claim (named <pod>-gpu).
func podGPUs(b *boundGang, pod string) int {
	for _, c := range b.claims {
		if c.Name == pod+"-gpu" {
			return len(c.Status.Allocation.Devices.Results)
		}
	}
	return 0
}

// snapshotFor returns the snapshot gang g places on: without the nodes of
// holds it may not backfill.
func (e *EnginePolicy) snapshotFor(ctx context.Context, g TraceGang) (*index.Snapshot, error) {
	st := e.starve
	if st == nil || len(st.holds) == 0 {
		return e.snap, nil
	}
	var owners []int
	held := sets.New[string]()
	now := time.Unix(st.now, 0)
	for id, h := range st.holds {
		if id == g.ID || preemption.MayBackfill(now, time.Duration(g.Duration)*time.Second, h.shadow, h.shadowOK) {
			continue
		}
		owners = append(owners, id)
		held = held.Union(h.nodes)
	}
	if len(owners) == 0 {
		return e.snap, nil
	}
	slices.Sort(owners)
	key := strings.Trim(fmt.Sprint(owners), "[]")
	if snap := st.variants[key]; snap != nil {
		return snap, nil
	}
	snap, err := index.NewSnapshot(ctx, e.cfg.Index, preemption.WithoutNodes(e.in, held))
	if err != nil {
		return nil, fmt.Errorf("snapshot without held nodes: %w", err)
	}
	st.variants[key] = snap
	return snap, nil
}

// assume adds a decision to the snapshot and every variant.
func (e *EnginePolicy) assume(ctx context.Context, g *placement.Gang, d *placement.Decision) error {
	if err := placement.Assume(ctx, e.snap, g, d); err != nil {
		return err
	}
	if e.starve == nil {
		return nil
	}
	for _, v := range e.starve.variants {
		if err := placement.Assume(ctx, v, g, d); err != nil {
			return err
		}
	}
	return nil
}
