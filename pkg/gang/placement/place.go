package placement

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"

	"k8s.io/klog/v2"

	"github.com/gpufabric/gpufabric/pkg/gang/placement/cost"
	"github.com/gpufabric/gpufabric/pkg/gang/placement/fabricrank"
	"github.com/gpufabric/gpufabric/pkg/gang/placement/index"
	"github.com/gpufabric/gpufabric/pkg/gang/placement/rails"
	"github.com/gpufabric/gpufabric/pkg/gang/placement/spares"
	"github.com/gpufabric/gpufabric/pkg/topology"
)

// Place decides where a gang goes on a snapshot: a Decision, or an
// Unschedulable that says why with numbers. An error means bad input (an
// invalid CEL expression, a missing DeviceClass, an unknown pack order) or
// a cancelled context.
//
// Rules: levels are tried in the order of index.Snapshot.LevelsFor; at a
// level, domains with enough free devices of the gang's main class are
// tried from the smallest leftover up (best fit), each verified node by node with the
// allocator; among verified domains with the same leftover (at most
// Config.CompareDomains of them) fewer rail sets win, then the smaller id.
// A gang of at least Config.LargeGangGPUs devices tries a level's domains
// without fabric trouble first (fabricrank.Order; Decision.FabricHealth).
// When no level holds all members and MinCount is smaller, the most members
// that fit (at least MinCount) are placed in one domain of the first level
// where that many fit; the Decision lists only them. A gang with BoundNodes
// (members already running) goes only to the domain that holds all those
// nodes, at the smallest of its levels that has one. Place does not change
// what the snapshot considers allocated; call Assume.
//
// Every Allocate call counts against Config.Budget and goes through the
// gang's Memory (allocator.go): a Place that spends its budget stops there
// and returns an Unschedulable with TimedOut set, as does one refused
// after any of its calls ran out of time (made or remembered).
func Place(ctx context.Context, cfg Config, s *index.Snapshot, g *Gang) (*Decision, *Unschedulable, error) {
	cfg = cfg.withDefaults()
	if _, err := ParsePackOrder(string(cfg.PackOrder)); err != nil {
		return nil, nil, err
	}
	if len(g.Members) == 0 || len(g.Members) < g.MinCount {
		return nil, nil, fmt.Errorf("%w: %d members, minCount %d", ErrNotReady, len(g.Members), g.MinCount)
	}
	p, err := newPlacer(ctx, cfg, s, g)
	if err != nil {
		return nil, nil, err
	}
	d, u, err := p.place(ctx)
	switch {
	case errors.Is(err, errBudget):
		return nil, p.timedOut(), nil
	case u != nil && p.meter.TimedOut():
		p.markTimedOut(u)
	}
	return d, u, err
}

// place is Place once the placer is made.
func (p *placer) place(ctx context.Context) (*Decision, *Unschedulable, error) {
	g, s := p.g, p.s
	if sg := p.fill.seg; sg != nil && sg.invalid != "" {
		return nil, &Unschedulable{Gang: g.Key(), Pods: len(g.Members), MinCount: g.MinCount, Devices: p.need, DeviceClass: p.class,
			SegmentSize: g.SegmentSize, SegmentTopologyKey: g.SegmentTopologyKey, Message: sg.invalid}, nil
	}
	levels := s.LevelsFor(g.TopologyKey, g.PreferredTopologyKey)
	if len(g.BoundNodes) > 0 {
		l, why := p.pinTo(levels)
		if l == nil {
			u := &Unschedulable{Gang: g.Key(), Pods: len(g.Members), Devices: p.need, DeviceClass: p.class, Stats: *p.stats, Message: why}
			return nil, u, nil
		}
		levels = []*topology.Level{l}
	}
	if key := g.PreferredTopologyKey; key != "" && len(s.Level(key).Domains) == 0 {
		p.warnings = append(p.warnings, fmt.Sprintf("preferred topology key %s: no node carries it, so it was ignored", key))
	}
	for _, l := range levels {
		att, err := p.placeAtLevel(ctx, l)
		if err != nil || att != nil {
			return p.decisionOrErr(l, att, err)
		}
	}
	if g.MinCount < len(g.Members) {
		for _, l := range levels {
			att, err := p.placePartial(ctx, l)
			if err != nil || att != nil {
				return p.decisionOrErr(l, att, err)
			}
		}
	}
	u, err := p.unschedulable(ctx)
	return nil, u, err
}

// decisionOrErr turns a winning attempt into a Decision, unless it hands
// a fabric-domain channel to a gang that uses no GPU of its domain
// (channelsWithoutGPUs): then the gang fits nowhere, and is told why.
func (p *placer) decisionOrErr(l *topology.Level, att *attempt, err error) (*Decision, *Unschedulable, error) {
	if err != nil {
		return nil, nil, err
	}
	d := p.decision(l, att)
	why, err := channelsWithoutGPUs(p.s, d)
	if err != nil {
		return nil, nil, err
	}
	if why == "" {
		return d, nil, nil
	}
	return nil, &Unschedulable{Gang: p.g.Key(), Pods: len(p.g.Members), MinCount: p.g.MinCount, Devices: p.need, DeviceClass: p.class, Stats: *p.stats, Message: why}, nil
}

// pinTo returns the first level (in the given order) where the gang's bound
// nodes are all in one domain, and pins the placer to that domain; or nil
// and why not.
func (p *placer) pinTo(levels []*topology.Level) (*topology.Level, string) {
	var spans []string
	for _, l := range levels {
		var dom *topology.Domain
		for _, n := range p.g.BoundNodes {
			d := l.DomainOf(n)
			if d == nil || dom != nil && d != dom {
				dom = nil
				break
			}
			dom = d
		}
		if dom != nil {
			p.pin = dom
			return l, ""
		}
		spans = append(spans, l.Key)
	}
	return nil, fmt.Sprintf("%d members of the gang already run on nodes %v, which share no domain of %v: the others cannot join them",
		len(p.g.BoundNodes), p.g.BoundNodes, spans)
}

// placer is one Place call: it walks the levels and their domains in
// best-fit order and keeps what the Decision or the Unschedulable reports.
// Verifying one domain is the filler's job (fill.go), explaining a refusal
// the explainer's (explain.go).
type placer struct {
	*members
	cfg  Config
	s    *index.Snapshot
	g    *Gang
	fit  *fits
	fill *filler
	// shared are the gang's shared claims to allocate.
	shared  sharedClaims
	stats   *Stats
	refused refusals
	reports []LevelReport
	// pin, when set, is the only domain the gang may go to: the one its
	// bound members run in.
	pin *topology.Domain
	// warnings about the gang's spec, for the Decision or Unschedulable.
	warnings []string
	// meter counts the Allocate calls against Config.Budget.
	meter      *cost.Meter
	fabricNote string // Decision.FabricHealth
}

// newPlacer makes the pieces of one Place call, each given what it needs.
func newPlacer(ctx context.Context, cfg Config, s *index.Snapshot, g *Gang) (*placer, error) {
	m, err := newMembers(g)
	if err != nil {
		return nil, err
	}
	for _, sh := range m.per { // a coupled role's rails (Gang.Rails)
		if len(g.Rails) > 0 && sh.need[m.class] > 0 {
			sh.claims = rails.NewCopies(m.class).Limit(sh.claims, g.Rails, true)
		}
	}
	shared, pins, err := sharedOf(g)
	if err != nil {
		return nil, err
	}
	stats, refused := &Stats{}, refusals{}
	alloc, err := newAllocator(cfg, s, g, stats)
	if err != nil {
		return nil, err
	}
	fit := newFits(ctx, m, s, pins)
	fit.spares = spares.NewGuard(cfg.Spares, s, g.BoundNodes, g.PreviousNodes)
	if g.Within != nil {
		fit.within = make(map[string]bool, len(g.Within.Nodes))
		for _, n := range g.Within.Nodes {
			fit.within[n] = true
		}
	}
	fill := newFiller(ctx, cfg, s, g, fit, alloc, refused, shared)
	p := &placer{members: m, cfg: cfg, s: s, g: g, fit: fit, fill: fill, shared: shared, stats: stats, refused: refused, meter: alloc.meter}
	if g.SegmentSize > 0 {
		fill.seg, err = newSegmenter(ctx, cfg, s, g, fill)
	}
	return p, err
}

// newFiller makes the filler and its pieces for the members fit checks,
// with the gang's settings and the Place call's allocator; the segmenter
// makes one per segment bin.
func newFiller(ctx context.Context, cfg Config, s *index.Snapshot, g *Gang, fit *fits, alloc allocator, refused refusals, shared sharedClaims) *filler {
	m, logger, stats := fit.members, klog.FromContext(ctx), alloc.stats
	rm, rstats := railMembers(m), rails.Stats{Cutoffs: &stats.RailCutoffs, FollowCalls: &stats.RailFollowCalls}
	rm.Within = g.Rails
	copies := rails.NewCopies(m.class)
	follow := rails.NewFollower(rm, s, copies, alloc, rstats, g.RailAlignmentRequired, cfg.oldRails)
	search := &searcher{members: m, s: s, fit: fit, follow: follow, copies: copies, alloc: alloc, stats: stats, refused: refused, logger: logger,
		on: needsSearch(m.distinct) && !cfg.greedyOnly, left: searchCallsPerPlace + 2*len(m.per)}
	align := &aligner{members: m, search: rails.NewSearch(rm, follow, fit, rstats), follow: follow, copies: copies, stats: stats, refused: refused, logger: logger,
		required: g.RailAlignmentRequired, old: cfg.oldRails}
	pack := &packer{members: m, s: s, fit: fit, order: cfg.PackOrder, balanced: g.Balanced}
	return &filler{members: m, s: s, fit: fit, pack: pack, follow: follow, align: align, search: search, alloc: alloc,
		refused: refused, shared: shared, anchors: cfg.MaxSharedAnchors, old: cfg.oldRails}
}

// entries returns the level's domains to try in best-fit order: those with
// at least need free devices (sharing nodes with Gang.Within), or only
// the pinned domain.
func (p *placer) entries(li *index.LevelIndex, need int) []*index.DomainEntry {
	if p.pin == nil && p.fit.within != nil {
		return slices.DeleteFunc(slices.Clone(li.From(need)), func(e *index.DomainEntry) bool { return !p.fit.touches(e.Domain()) })
	}
	if p.pin == nil {
		return li.From(need)
	}
	if len(p.pin.Nodes) == 0 {
		return nil
	}
	if e := li.Of(p.pin.Nodes[0]); e != nil && e.Free() >= need {
		return []*index.DomainEntry{e}
	}
	return nil
}

// placeAtLevel tries the level's domains in best-fit order and returns the
// winning attempt for the whole gang, or nil after recording a LevelReport.
func (p *placer) placeAtLevel(ctx context.Context, l *topology.Level) (*attempt, error) {
	li, err := p.s.LevelIndex(ctx, l, p.class)
	if err != nil {
		return nil, err
	}
	rep := LevelReport{TopologyKey: l.Key, Domains: len(li.Entries())}
	var best *attempt
	compared, bestAt := 0, 0
	entries, healthy := p.entries(li, p.need), -1
	if p.cfg.LargeGangGPUs > 0 && p.need >= p.cfg.LargeGangGPUs {
		entries, healthy = fabricrank.Order(p.s, entries) // sick domains last (docs/design/health.md)
	}
	for i, e := range entries {
		left := e.Free() - p.need
		if best != nil && (i == healthy || left > best.score.LeftoverDevices || compared >= p.cfg.CompareDomains || best.score.RailSets <= 1) {
			break
		}
		if e.PodsBound(p.perPod) < len(p.per) {
			continue
		}
		ok, _, err := p.fit.countFit(ctx, e.Domain())
		if err != nil {
			return nil, err
		}
		if !ok {
			continue
		}
		rep.Candidates++
		rep.Verified++
		p.stats.DomainsVerified++
		att, err := p.fill.verify(ctx, e.Domain(), len(p.per))
		if err != nil {
			return nil, err
		}
		if att == nil {
			continue
		}
		att.score.LeftoverDevices = left
		compared++
		if best == nil || att.score.RailSets < best.score.RailSets {
			best, bestAt = att, i
		}
	}
	if best != nil {
		p.fabricNote = fabricrank.Note(p.s, entries, healthy, bestAt)
		return best, nil
	}
	if err := p.report(ctx, li, &rep); err != nil {
		return nil, err
	}
	p.reports = append(p.reports, rep)
	return nil, nil
}

// report fills a level's Best: the pinned domain, or the one with the most
// free devices.
func (p *placer) report(ctx context.Context, li *index.LevelIndex, rep *LevelReport) error {
	var e *index.DomainEntry
	switch {
	case p.pin != nil && len(p.pin.Nodes) > 0:
		e = li.Of(p.pin.Nodes[0])
		rep.Pinned = true
	case len(li.Entries()) > 0:
		e = li.Entries()[len(li.Entries())-1]
	}
	if e == nil {
		return nil
	}
	_, fit, err := p.fit.countFit(ctx, e.Domain())
	if err != nil {
		return err
	}
	rep.Best = &DomainReport{ID: e.Domain().ID, FreeDevices: e.Free(), PodsFit: fit}
	return nil
}

// placePartial places the most members that fit, at least MinCount, in one
// domain of the level: the domains where the cheap checks fit the most
// members are verified (at most Config.CompareDomains of them); more
// members win, then the smaller leftover, then fewer rail sets.
func (p *placer) placePartial(ctx context.Context, l *topology.Level) (*attempt, error) {
	li, err := p.s.LevelIndex(ctx, l, p.class)
	if err != nil {
		return nil, err
	}
	type cand struct {
		e   *index.DomainEntry
		fit int
	}
	var cands []cand
	for _, e := range p.entries(li, p.perPod*p.g.MinCount) {
		if e.PodsBound(p.perPod) < p.g.MinCount {
			continue
		}
		fit, err := p.fit.countMembers(ctx, e.Domain())
		if err != nil {
			return nil, err
		}
		if fit >= p.g.MinCount {
			cands = append(cands, cand{e, fit})
		}
	}
	sort.SliceStable(cands, func(i, j int) bool {
		if cands[i].fit != cands[j].fit {
			return cands[i].fit > cands[j].fit
		}
		return cands[i].e.Before(cands[j].e)
	})
	var best *attempt
	for _, c := range cands[:min(len(cands), p.cfg.CompareDomains)] {
		p.stats.DomainsVerified++
		att, err := p.fill.verify(ctx, c.e.Domain(), p.g.MinCount)
		if err != nil {
			return nil, err
		}
		if att == nil {
			continue
		}
		att.score.LeftoverDevices = c.e.Free() - p.devicesOf(att)
		if best == nil || betterPartial(att, best) {
			best = att
		}
	}
	return best, nil
}

func betterPartial(a, b *attempt) bool {
	if len(a.members) != len(b.members) {
		return len(a.members) > len(b.members)
	}
	if a.score.LeftoverDevices != b.score.LeftoverDevices {
		return a.score.LeftoverDevices < b.score.LeftoverDevices
	}
	return a.score.RailSets < b.score.RailSets
}
