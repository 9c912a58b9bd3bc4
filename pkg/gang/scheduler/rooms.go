package scheduler

import (
	"context"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	schedulingv1alpha3 "k8s.io/api/scheduling/v1alpha3"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"

	"github.com/gpufabric/gpufabric/pkg/gang/assume"
	"github.com/gpufabric/gpufabric/pkg/gang/commit"
	"github.com/gpufabric/gpufabric/pkg/gang/evict"
	"github.com/gpufabric/gpufabric/pkg/gang/extres"
	"github.com/gpufabric/gpufabric/pkg/gang/guard"
	"github.com/gpufabric/gpufabric/pkg/gang/memberevents"
	"github.com/gpufabric/gpufabric/pkg/gang/nodetrust"
	"github.com/gpufabric/gpufabric/pkg/gang/placement"
	"github.com/gpufabric/gpufabric/pkg/gang/placement/index"
	"github.com/gpufabric/gpufabric/pkg/gang/replace"
	"github.com/gpufabric/gpufabric/pkg/gang/report"
	"github.com/gpufabric/gpufabric/pkg/gang/trees"
	"github.com/gpufabric/gpufabric/pkg/gang/volumepins"
)

var (
	_ guard.Metrics       = (*Metrics)(nil)
	_ guard.ClaimReleaser = claimReleaser{}
	_ commit.Conditions   = (*conditions)(nil)
	_ evict.Conditions    = (*conditions)(nil)
	_ replace.Conditions  = (*conditions)(nil)
)

// wireLoop takes the listers of this term's informers and builds the parts
// of the loop that read only them: the gangs' pods, the snapshots (sharing
// the assume cache) and the volume pins.
func (s *Scheduler) wireLoop(factory informers.SharedInformerFactory) {
	s.pods = factory.Core().V1().Pods().Lister()
	s.podGroups = factory.Scheduling().V1beta1().PodGroups().Lister()
	s.claims = factory.Resource().V1().ResourceClaims().Lister()
	s.nodes = factory.Core().V1().Nodes().Lister()
	s.pdbs = factory.Policy().V1().PodDisruptionBudgets().Lister()
	s.gangs = &gangPods{pods: s.inf.pods.GetIndexer(), nodes: s.nodes, guard: s.cfg.Members}
	s.snaps = &snapshots{
		index: s.cfg.Placement.Index, recordNamespace: s.cfg.RecordNamespace, metrics: s.cfg.Metrics, assumed: s.assumed,
		pods: s.pods, nodes: s.nodes, claims: s.claims,
		templates: factory.Resource().V1().ResourceClaimTemplates().Lister(),
		slices:    factory.Resource().V1().ResourceSlices().Lister(),
		classes:   factory.Resource().V1().DeviceClasses().Lister(),
	}
	s.snaps.shown = &assume.Shown{Pods: s.pods, Nodes: s.nodes, Claims: s.claims}
	if !s.cfg.RebuildSnapshots {
		s.snaps.cache = index.NewCache(s.cfg.Placement.Index)
		s.snaps.shown.Cache = s.snaps.cache
	}
	s.volumes = &volumepins.Pins{
		PVCs:           factory.Core().V1().PersistentVolumeClaims().Lister(),
		PVs:            factory.Core().V1().PersistentVolumes().Lister(),
		StorageClasses: factory.Storage().V1().StorageClasses().Lister(),
	}
}

// wireRooms builds the gang status and the commit and evict rooms of this
// term once the listers, the reporter and the gate exist: each takes what
// it needs, and calls back into the loop only through the small interfaces
// it declares (the queue serves evict.Requeuer as it is).
func (s *Scheduler) wireRooms() {
	s.status = &gangStatus{
		client: s.cfg.Client, gate: s.gate, conditions: s.conditions, report: s.report,
		metrics: s.cfg.Metrics, parallelism: s.cfg.CommitParallelism,
		templates: s.snaps.templates, gangs: s.gangs, queue: s.queue, pending: &s.pending,
		toMembers: memberevents.New(s.report),
		writes:    report.Throttle{Interval: notReadyWriteInterval, Settle: notReadySettle},
	}
	s.commits = commit.New(commit.Config{
		Client: s.cfg.Client, RecordNamespace: s.cfg.RecordNamespace, Parallelism: s.cfg.CommitParallelism,
		Gate: s.gate, Report: s.report, Metrics: s.cfg.Metrics.CommitMetrics(), Conditions: s.conditions,
		Pods: s.pods, PodGroups: s.podGroups, Claims: s.claims, Nodes: s.nodes,
	})
	cfg := evict.Config{
		Client: s.cfg.Client, Store: s.commits.Store(), Releaser: s.commits, Parallelism: s.cfg.CommitParallelism,
		Gate: s.gate, Report: s.report, Metrics: s.cfg.Metrics.EvictMetrics(), Conditions: s.conditions,
		Queue: s.queue, Gangs: s.gangs, Disruptions: &s.inf.disrupted,
		Pods: s.pods, PodGroups: s.podGroups, Claims: s.claims, PDBs: s.pdbs, PriorityClasses: s.inf.factory.Scheduling().V1().PriorityClasses().Lister(),
		Placement: s.cfg.Placement, DisablePreemption: s.cfg.DisablePreemption,
		NominationTimeout: s.cfg.NominationTimeout, PreemptionBudget: s.cfg.PreemptionBudget, StarvationBound: s.cfg.StarvationBound,
		StarvationReservationsPerNamespace: s.cfg.StarvationReservationsPerNamespace,
	}
	s.status.replacer = replace.New(replace.Deps{Config: s.cfg.Replace, Client: s.cfg.Client, Gate: s.gate, Report: s.report,
		Metrics: s.cfg.Metrics.ReplaceMetrics(), Conditions: s.conditions, Restarts: treeRestarts{s}, Deletions: &s.inf.deletions,
		Tree: listerTree(s).Tree}) // a whole gang's previous domain, by id over a restart
	s.gangs.classify, s.inf.lost = s.status.replacer.Classify, s.status.replacer.Disrupted
	s.gangs.previous = s.status.replacer
	cfg.NodeLost = s.gangs.nodeLost
	if s.inf.composites != nil {
		cfg.Trees = s.treeReader() // victims valued and grouped by their trees
	}
	s.evict = evict.New(cfg)
	s.prios = evict.NewPriorities(cfg)
	s.restarts = evict.NewRestarter(cfg)
	s.snaps.trust = nodetrust.New(s.report, s.nodes.Get, nil)
	s.extended = extres.New(extres.Config{Client: s.cfg.Client, Claims: s.claims, Classes: s.snaps.classes, Gate: s.gate, Parallelism: s.cfg.CommitParallelism})
	if s.inf.composites != nil {
		s.tree = s.newTreeCycle()
	}
}

// treeReader reads trees from this term's informers.
func (s *Scheduler) treeReader() *trees.Reader {
	composites := s.inf.factory.Scheduling().V1alpha3().CompositePodGroups().Lister()
	get := func(ns, name string) (*schedulingv1alpha3.CompositePodGroup, error) {
		return composites.CompositePodGroups(ns).Get(name)
	}
	return &trees.Reader{Composites: compositeGetter(get), CompositeChildren: s.inf.composites.GetIndexer(), PodGroupChildren: s.inf.podGroups.GetIndexer()}
}

// newTreeCycle builds the tree attempts of this term (pkg/gang/trees) on
// the loop's parts: the listers, the snapshots, the commit and evict
// rooms, the pipeline and the gang status.
func (s *Scheduler) newTreeCycle() *trees.Cycle {
	r := s.treeReader()
	return trees.NewCycle(trees.Deps{
		Reader: r, Lister: r.Composites.Get, Queue: s.queue, Assumed: s.assumed, Visible: s.snaps.shown.Visible,
		Snapshot: s.snaps.snapshot, Input: s.snaps.inputFor, Evictor: s.evict, Priorities: s.prios, DisablePreemption: s.cfg.DisablePreemption,
		Commits: s.commits, Pipeline: s.pipe, Conditions: s.conditions, Report: s.report, Metrics: s.cfg.Metrics,
		Members: s.gangs.leafMembers,
		SetPods: s.status.setPods, Pending: s.pending.set, GetClaim: s.getClaim,
		Prepare: s.prepare, Forget: s.forget, Done: s.evict.GangDone,
		Placement: s.cfg.Placement, PlacementTime: s.cfg.PlacementTime, PlaceCalls: s.cfg.TreePlaceCalls,
	})
}

// compositeGetter serves trees.Composites from the lister.
type compositeGetter func(namespace, name string) (*schedulingv1alpha3.CompositePodGroup, error)

func (g compositeGetter) Get(namespace, name string) (*schedulingv1alpha3.CompositePodGroup, error) {
	return g(namespace, name)
}

// prepare pins a built gang's members to their volumes' nodes, then gives
// them their claims for extended resources backed by DRA
// (pkg/gang/extres), before the gang is placed.
func (s *Scheduler) prepare(ctx context.Context, g *placement.Gang) error {
	if err := s.volumes.Pin(g); err != nil {
		return err
	}
	return s.extended.Attach(ctx, g)
}

// newGuard builds the double-allocation guard of this term on the
// informers' listers, the gate and the reporter; it releases claims
// through the commit room (wireRooms first).
func (s *Scheduler) newGuard() *guard.Guard {
	return guard.New(guard.Config{
		Client: s.cfg.Client, RecordNamespace: s.cfg.RecordNamespace, Claims: s.claims, Pods: s.pods,
		GroupPods: func(namespace, podGroup string) []*v1.Pod {
			pods, _ := s.gangs.GroupPods(namespace, podGroup)
			return pods
		},
		Gate: s.gate, Report: s.report, Metrics: s.cfg.Metrics, Releaser: claimReleaser{s.commits},
	})
}

// claimReleaser releases the claims the guard frees through the commit
// room (commit.Committer.ReleaseClaim): the consumers' reservations, then,
// with none left, the allocation.
type claimReleaser struct{ commits *commit.Committer }

func (r claimReleaser) ReleaseClaim(ctx context.Context, namespace, name string, uid types.UID, consumers map[types.UID]bool) error {
	_, err := r.commits.ReleaseClaim(ctx, namespace, name, uid, consumers, func(*resourceapi.AllocationResult) bool { return true })
	return err
}
