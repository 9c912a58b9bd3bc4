package scheduler

import (
	"context"
	"fmt"
	"time"

	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/scheme"
	corelisters "k8s.io/client-go/listers/core/v1"
	policylisters "k8s.io/client-go/listers/policy/v1"
	resourcelisters "k8s.io/client-go/listers/resource/v1"
	schedulinglistersv1alpha3 "k8s.io/client-go/listers/scheduling/v1alpha3"
	schedulinglisters "k8s.io/client-go/listers/scheduling/v1beta1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"

	"github.com/gpufabric/gpufabric/pkg/gang/assume"
	"github.com/gpufabric/gpufabric/pkg/gang/commit"
	"github.com/gpufabric/gpufabric/pkg/gang/domains"
	"github.com/gpufabric/gpufabric/pkg/gang/evict"
	"github.com/gpufabric/gpufabric/pkg/gang/extres"
	"github.com/gpufabric/gpufabric/pkg/gang/freeroom"
	"github.com/gpufabric/gpufabric/pkg/gang/gate"
	"github.com/gpufabric/gpufabric/pkg/gang/guard"
	"github.com/gpufabric/gpufabric/pkg/gang/placement/cost"
	"github.com/gpufabric/gpufabric/pkg/gang/placement/index"
	"github.com/gpufabric/gpufabric/pkg/gang/queue"
	"github.com/gpufabric/gpufabric/pkg/gang/report"
	"github.com/gpufabric/gpufabric/pkg/gang/trees"
	"github.com/gpufabric/gpufabric/pkg/gang/volumepins"
	"github.com/gpufabric/gpufabric/pkg/topology"
	resourceapi "k8s.io/api/resource/v1"
)

// schedulerName is the reporting controller of events and the field manager
// of writes.
const schedulerName = topology.SchedulerName

// Scheduler places gangs of pods with schedulerName gpufabric-scheduler.
// One Scheduler serves one leadership term: call Run once. It owns the
// loop (the worker, the attempts, the metrics loop) and wires the parts
// the loop calls (set by Run): the snapshots, the volume pins, the gang
// status and the rooms (rooms.go).
type Scheduler struct {
	cfg     Config
	queue   queue.Interface
	assumed *assume.Cache
	// The rooms of one term (set by Run, rooms.go): commits writes
	// decisions and recovers half-done commits; evict carries preemptions
	// out and holds room for gangs (nominations, reservations); restarts
	// restarts gangs disrupted only whole. conditions writes PodGroup
	// conditions for the loop, the gang status and the rooms.
	commits    *commit.Committer
	evict      *evict.Evictor
	restarts   *evict.Restarter
	prios      *evict.Priorities
	conditions *conditions
	// guard repairs double allocations and holds forgotten devices
	// (rooms.go); set by Run.
	guard   *guard.Guard
	pending pendingSet
	// pools publishes the fabric-domain pools (nil without channels).
	pools *domains.Publisher
	// costs: the gangs' memories of refused and timed-out Allocate calls.
	costs *cost.Memories

	// Set by Run: the informers and the listers the loop and the rooms
	// read; gangs reads gangs' pods; snaps serves the worker its
	// snapshots (the assume cache is shared with it); volumes pins members
	// to their volumes' nodes, extended gives them their claims for
	// extended resources (prepare); status writes what users read of a gang.
	inf       *informerSet
	pods      corelisters.PodLister
	podGroups schedulinglisters.PodGroupLister
	claims    resourcelisters.ResourceClaimLister
	nodes     corelisters.NodeLister
	pdbs      policylisters.PodDisruptionBudgetLister
	gangs     *gangPods
	snaps     *snapshots
	volumes   *volumepins.Pins
	extended  *extres.Claims
	status    *gangStatus
	// report records events (notes bounded); gate is checked before every
	// write.
	report *report.Reporter
	gate   *gate.Gate
	// tree runs the attempts of CompositePodGroup trees (nil unless
	// Config.CompositePodGroups; pkg/gang/trees).
	tree *trees.Cycle
	// pipe runs commits beside the worker; handedOff: the worker's current
	// key went to it (the pipeline marks the key done).
	pipe      *commit.Pipeline
	handedOff bool
}

// New validates cfg and creates a Scheduler.
func New(cfg Config) (*Scheduler, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if cfg.Placement.Index.MatchCache == nil {
		cfg.Placement.Index.MatchCache = index.NewMatchCache()
	}
	cfg.Placement.Index.Tree = cfg.Tree
	s := &Scheduler{
		cfg:     cfg,
		queue:   queue.New(queue.Config{InitialBackoff: cfg.InitialBackoff, MaxBackoff: cfg.MaxBackoff, MaxUnschedulableWait: cfg.MaxUnschedulableWait}),
		assumed: assume.New(),
		costs:   cost.NewMemories(0),
	}
	s.pipe = commit.NewPipeline(cfg.CommitsInFlight, s.queue.ShutDown)
	s.gate = &gate.Gate{Stopped: s.pipe.Stopped, Fence: cfg.Fence, Hook: cfg.CommitHook}
	s.conditions = &conditions{client: cfg.Client, gate: s.gate}
	return s, nil
}

// Run starts the informers (and the fabric-domain publisher when
// configured), waits for them, recovers half-done commits, then schedules
// until ctx is done. It returns nil when ctx is done, an error wrapping
// gate.ErrAborted when a CommitHook aborted it, and one wrapping gate.ErrFenced when
// the Fence said the Lease may be lost.
func (s *Scheduler) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	ctx, cancel := context.WithCancel(ctx)
	factory := informers.NewSharedInformerFactoryWithOptions(s.cfg.Client, 0, informers.WithTransform(trimObject))
	defer func() {
		cancel()
		s.queue.ShutDown()
		factory.Shutdown()
	}()
	if err := s.setup(ctx, factory); err != nil {
		return err
	}
	factory.Start(ctx.Done())
	if s.cfg.InformersStarted != nil {
		s.cfg.InformersStarted(s.inf.unsynced)
	}
	if !cache.WaitForCacheSync(ctx.Done(), s.inf.synced()...) {
		return fmt.Errorf("wait for informers: %w", context.Cause(ctx))
	}
	// Keys queued while the informers filled were ranked on what they
	// showed then.
	s.queue.Reorder()
	logger.Info("Informers synced, recovering half-done commits")
	if err := s.commits.RecoverAll(ctx); err != nil {
		return fmt.Errorf("recover: %w", err)
	}
	nominated, err := s.evict.Load(ctx)
	if err != nil {
		return fmt.Errorf("recover: %w", err)
	}
	for _, key := range nominated {
		s.queue.Add(key) // carried on (or ended) by its gang's next attempt
	}
	s.snaps.warm(ctx)
	if s.cfg.OnRecovered != nil {
		s.cfg.OnRecovered()
	}
	s.cfg.Metrics.Attach(func() (map[string]int, map[string]int) { return s.queue.Counts(), s.pending.counts() })
	go s.metricsLoop(ctx)
	if s.cfg.FreeRoomInterval > 0 {
		go freeroom.Run(ctx, freeRoomConfig(s))
	}
	go s.guard.Run(ctx)
	go s.evict.Run(ctx)
	go func() {
		<-ctx.Done()
		s.queue.ShutDown()
	}()
	// A gang tried before its domain's channel pool is seen is refused for
	// a pool on its way, and the next gang takes its room.
	if s.pools != nil && !s.pools.WaitPublished(ctx, poolsWait) {
		logger.Info("Fabric-domain pools not all seen yet, scheduling without them", "waited", poolsWait)
	}
	logger.Info("Scheduling")
	return s.work(ctx)
}

// poolsWait bounds how long the first cycle waits for the fabric-domain
// pools the publisher wrote to reach the informer.
const poolsWait = 10 * time.Second

func (s *Scheduler) setup(ctx context.Context, factory informers.SharedInformerFactory) error {
	inf, err := newInformerSet(factory, s.cfg.CompositePodGroups)
	if err != nil {
		return err
	}
	inf.metrics = s.cfg.Metrics
	s.inf = inf
	s.wireLoop(factory)
	var feed []informerHandler
	if s.snaps.cache != nil {
		feed = s.snaps.cacheFeed(inf)
	}
	if err := inf.watch(s.queue, feed); err != nil {
		return err
	}
	broadcaster := events.NewBroadcaster(&events.EventSinkImpl{Interface: s.cfg.Client.EventsV1()})
	if err := broadcaster.StartRecordingToSinkWithContext(ctx); err != nil {
		return fmt.Errorf("start event broadcaster: %w", err)
	}
	context.AfterFunc(ctx, broadcaster.Shutdown)
	s.report = report.New(broadcaster.NewRecorder(scheme.Scheme, schedulerName))
	s.wireRooms()
	var composites schedulinglistersv1alpha3.CompositePodGroupLister
	var leaves treeLeaves
	if inf.composites != nil {
		composites = factory.Scheduling().V1alpha3().CompositePodGroups().Lister()
		leaves = leavesOf(s.treeReader())
	}
	s.queue.SetRank(rankOf(s.pods, s.podGroups, composites, leaves, s.prios))
	s.guard = s.newGuard()
	if err := s.guard.Watch(inf.claims); err != nil {
		return err
	}
	if s.cfg.DomainChannels > 0 {
		pools, err := domains.Start(ctx, domains.Config{Client: s.cfg.Client, Slices: inf.slices, Nodes: inf.nodes, Channels: s.cfg.DomainChannels,
			RequireAdminLabels: s.cfg.Tree.RequireAdminLabels})
		if err != nil {
			return fmt.Errorf("start fabric-domain publisher: %w", err)
		}
		s.pools = pools
	}
	return nil
}

// work is the single worker: one gang at a time is placed; its commit runs
// in the pipeline while the next is placed (commit.Pipeline). It returns once
// no commit is in flight.
func (s *Scheduler) work(ctx context.Context) error {
	defer s.pipe.Wait()
	for {
		if err := s.pipe.Stopped(); err != nil {
			return err
		}
		key, quit := s.queue.Get()
		if quit {
			s.pipe.Wait()
			return s.pipe.Stopped()
		}
		s.handedOff = false
		began := time.Now()
		err := s.scheduleKey(ctx, key)
		s.queue.Charge(key, time.Since(began)) // its namespace's share of the worker
		if !s.handedOff {
			s.queue.Done(key)
		}
		if gate.Stops(err) {
			return err
		}
		if err != nil && ctx.Err() == nil {
			klog.FromContext(ctx).Error(err, "Scheduling attempt failed", "gang", key)
		}
	}
}

// getClaim serves the engine from the claim informer.
func (s *Scheduler) getClaim(namespace, name string) (*resourceapi.ResourceClaim, error) {
	return s.claims.ResourceClaims(namespace).Get(name)
}

// metricsFullRefresh: the free-GPU gauges are recomputed at least every
// this many metrics intervals.
const metricsFullRefresh = 10

// metricsLoop refreshes the free-GPU gauges: when a slice, claim or node
// changed since the last refresh, and every metricsFullRefresh ticks
// anyway (assumed decisions age out without an event). An idle cluster
// costs nothing.
func (s *Scheduler) metricsLoop(ctx context.Context) {
	if s.cfg.Metrics == nil {
		return
	}
	t := time.NewTicker(s.cfg.MetricsInterval)
	defer t.Stop()
	var seen uint64
	for tick := 0; ; tick++ {
		if n := s.inf.capacityEvents.Load(); n != seen || tick == 0 || tick%metricsFullRefresh == 0 {
			seen = n
			if free, err := s.snaps.freeGPUs(); err == nil {
				s.cfg.Metrics.SetFreeGPUs(free)
			} else {
				klog.FromContext(ctx).Error(err, "Computing free GPUs")
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
