package main

import (
	"context"
	"fmt"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"

	"github.com/gpufabric/gpufabric/pkg/gang/membership"
	"github.com/gpufabric/gpufabric/pkg/gang/report"
	"github.com/gpufabric/gpufabric/pkg/topology"
)

// memberGuard starts the membership check of gpufabric-grouper's
// PodGroups (--member-guard): its metadata informers (Jobs, StatefulSets,
// LeaderWorkerSet leader pods, the grouper's PodGroups) for the process's
// life, waited for up to --informer-sync-timeout (until they synced the
// guard admits every pod), and its own event recorder.
func (o *options) memberGuard(ctx context.Context, client kubernetes.Interface) (*membership.Guard, error) {
	if !o.memberGuardOn {
		return nil, nil
	}
	restCfg, err := o.restConfig()
	if err != nil {
		return nil, fmt.Errorf("load kubeconfig: %w", err)
	}
	restCfg.UserAgent = topology.SchedulerName
	restCfg.QPS, restCfg.Burst = float32(o.apiQPS), o.apiBurst
	meta, err := metadata.NewForConfig(restCfg)
	if err != nil {
		return nil, fmt.Errorf("create metadata client: %w", err)
	}
	owners := membership.NewOwners(meta)
	owners.Run(ctx)
	syncCtx, cancel := context.WithTimeout(ctx, o.syncTimeout)
	defer cancel()
	if err := owners.WaitForSync(syncCtx); err != nil {
		klog.FromContext(ctx).Error(err, "Membership informers not synced: every pod is admitted until they are (check the scheduler's RBAC on jobs and statefulsets)")
	}
	broadcaster := events.NewBroadcaster(&events.EventSinkImpl{Interface: client.EventsV1()})
	broadcaster.StartRecordingToSink(ctx.Done())
	return membership.New(owners, report.New(broadcaster.NewRecorder(scheme.Scheme, topology.SchedulerName))), nil
}
