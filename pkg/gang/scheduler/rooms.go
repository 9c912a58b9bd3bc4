package scheduler

import (
	"context"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpufabric/gpufabric/pkg/gang/commit"
	"github.com/gpufabric/gpufabric/pkg/gang/evict"
	"github.com/gpufabric/gpufabric/pkg/gang/guard"
)

var (
	_ guard.Metrics       = (*Metrics)(nil)
	_ guard.ClaimReleaser = claimReleaser{}
	_ commit.Conditions   = (*conditions)(nil)
	_ evict.Conditions    = (*conditions)(nil)
	_ evict.Gangs         = gangPods{}
)

// wireRooms builds the commit and evict rooms of this term once the
// listers, the reporter and the gate exist: each takes what it needs, and
// calls back into the loop only through the small interfaces it declares
// (the queue serves evict.Requeuer as it is).
func (s *Scheduler) wireRooms() {
	s.commits = commit.New(commit.Config{
		Client: s.cfg.Client, RecordNamespace: s.cfg.RecordNamespace, Parallelism: s.cfg.CommitParallelism,
		Gate: s.gate, Report: s.report, Metrics: s.cfg.Metrics.commitMetrics(), Conditions: s.conditions,
		Pods: s.pods, PodGroups: s.podGroups, Claims: s.claims, Nodes: s.nodes,
	})
	cfg := evict.Config{
		Client: s.cfg.Client, Store: s.commits.Store(), Releaser: s.commits, Parallelism: s.cfg.CommitParallelism,
		Gate: s.gate, Report: s.report, Metrics: s.cfg.Metrics.evictMetrics(), Conditions: s.conditions,
		Queue: s.queue, Gangs: gangPods{s}, Disruptions: &s.inf.disrupted,
		Pods: s.pods, PodGroups: s.podGroups, Claims: s.claims, PDBs: s.pdbs,
		Placement: s.cfg.Placement, DisablePreemption: s.cfg.DisablePreemption,
		NominationTimeout: s.cfg.NominationTimeout, PreemptionBudget: s.cfg.PreemptionBudget, StarvationBound: s.cfg.StarvationBound,
	}
	s.evict = evict.New(cfg)
	s.restarts = evict.NewRestarter(cfg)
}

// newGuard builds the double-allocation guard of this term on the
// informers' listers, the gate and the reporter.
func (s *Scheduler) newGuard(inf *informerSet) *guard.Guard {
	return guard.New(guard.Config{
		Client:          s.cfg.Client,
		RecordNamespace: s.cfg.RecordNamespace,
		Claims:          s.claims,
		Pods:            s.pods,
		GroupPods: func(namespace, podGroup string) []*v1.Pod {
			pods, _ := indexedPods(inf, podGroupIndex, namespace+"/"+podGroup)
			return pods
		},
		Gate:     s.gate,
		Report:   s.report,
		Metrics:  s.cfg.Metrics,
		Releaser: claimReleaser{s},
	})
}

// claimReleaser releases the claims the guard frees through the commit
// room (commit.Committer.ReleaseClaim): the consumers' reservations, then,
// with none left, the allocation.
type claimReleaser struct{ s *Scheduler }

func (r claimReleaser) ReleaseClaim(ctx context.Context, namespace, name string, uid types.UID, consumers map[types.UID]bool) error {
	_, err := r.s.commits.ReleaseClaim(ctx, namespace, name, uid, consumers, func(*resourceapi.AllocationResult) bool { return true })
	return err
}

// gangPods serves the evict room the pods of the informers' indexes.
type gangPods struct{ s *Scheduler }

func (g gangPods) GroupPods(namespace, name string) ([]*v1.Pod, error) {
	return indexedPods(g.s.inf, podGroupIndex, namespace+"/"+name)
}

func (g gangPods) NodePods(node string) ([]*v1.Pod, error) {
	return indexedPods(g.s.inf, nodeIndex, node)
}

func (g gangPods) Waiting(pg *schedulingv1beta1.PodGroup) ([]*v1.Pod, error) {
	ms, err := g.s.members(pg)
	if err != nil {
		return nil, err
	}
	return ms.pending, nil
}

// indexedPods lists the pods of the pod informer's index under value.
func indexedPods(inf *informerSet, index, value string) ([]*v1.Pod, error) {
	objs, err := inf.pods.GetIndexer().ByIndex(index, value)
	if err != nil {
		return nil, err
	}
	pods := make([]*v1.Pod, 0, len(objs))
	for _, o := range objs {
		if p, ok := o.(*v1.Pod); ok {
			pods = append(pods, p)
		}
	}
	return pods, nil
}

// preemptor is the attempt as the evict room sees it.
func (a *attempt) preemptor() *evict.Attempt {
	return &evict.Attempt{Key: a.key, PodGroup: a.pg, Pod: a.pod, Priority: a.priority, Members: a.members}
}
