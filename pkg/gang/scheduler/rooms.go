package scheduler

import (
	"context"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpufabric/gpufabric/pkg/gang/guard"
)

var (
	_ guard.Metrics       = (*Metrics)(nil)
	_ guard.ClaimReleaser = claimReleaser{}
)

// newGuard builds the double-allocation guard of this term on the
// informers' listers, the gate and the reporter.
func (s *Scheduler) newGuard(inf *informerSet) *guard.Guard {
	return guard.New(guard.Config{
		Client:          s.cfg.Client,
		RecordNamespace: s.cfg.RecordNamespace,
		Claims:          s.claims,
		Pods:            s.pods,
		GroupPods: func(namespace, podGroup string) []*v1.Pod {
			objs, _ := inf.pods.GetIndexer().ByIndex(podGroupIndex, namespace+"/"+podGroup)
			pods := make([]*v1.Pod, 0, len(objs))
			for _, o := range objs {
				if p, ok := o.(*v1.Pod); ok {
					pods = append(pods, p)
				}
			}
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
