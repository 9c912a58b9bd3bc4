package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	schedulingv1alpha3 "k8s.io/api/scheduling/v1alpha3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"

	"github.com/gpufabric/gpufabric/pkg/component/clientmetrics"
	"github.com/gpufabric/gpufabric/pkg/component/version"
	"github.com/gpufabric/gpufabric/pkg/gang/membership"
	"github.com/gpufabric/gpufabric/pkg/gang/placement"
	"github.com/gpufabric/gpufabric/pkg/gang/placement/cost"
	"github.com/gpufabric/gpufabric/pkg/gang/report"
	"github.com/gpufabric/gpufabric/pkg/gang/scheduler"
	"github.com/gpufabric/gpufabric/pkg/topology"
)

// discoveryTimeout bounds one api-served check.
const discoveryTimeout = 5 * time.Second

// run wires metrics, clients, health checks and leader election, and
// schedules until ctx is done.
func (o *options) run(ctx context.Context) error {
	reg, err := o.registry()
	if err != nil {
		return err
	}
	metrics, err := scheduler.NewMetricsWith(reg, scheduler.MetricsOptions{PerDomain: o.domainMetrics})
	if err != nil {
		return fmt.Errorf("register metrics: %w", err)
	}
	client, dc, err := o.clients()
	if err != nil {
		return err
	}
	h := newHealth(klog.FromContext(ctx).WithName("health"), dc, o.leaderElect, o.syncTimeout)
	hh, err := h.handler()
	if err != nil {
		return err
	}
	if _, err := o.serveHTTP(ctx, reg, hh.Install); err != nil {
		return err
	}
	cfg := o.schedulerConfig(client, metrics)
	if cfg.Members, err = o.memberGuard(ctx, client); err != nil {
		return err
	}
	if cfg.CompositePodGroups, err = o.compositesServed(dc); err != nil {
		return err
	}
	klog.FromContext(ctx).Info("CompositePodGroups", "placed as trees", cfg.CompositePodGroups, "flag", o.composites)
	cfg.InformersStarted = func(unsynced func() []string) {
		h.informersStarted(unsynced)
		if o.leaderElect {
			go ownLease(ctx, client, o.leNamespace, o.leName) // the term's Lease is this replica's now
		}
	}
	if !o.leaderElect {
		s, err := scheduler.New(cfg)
		if err != nil {
			return err
		}
		return s.Run(ctx)
	}
	le, err := o.leaderElection()
	if err != nil {
		return err
	}
	le.WatchDog = h.leader
	return scheduler.RunWithLeaderElection(ctx, cfg, le)
}

// clients are the API client (rate limits and encoding from the flags)
// and a discovery client with a short timeout for the health checks.
func (o *options) clients() (kubernetes.Interface, discovery.DiscoveryInterface, error) {
	restCfg, err := o.restConfig()
	if err != nil {
		return nil, nil, fmt.Errorf("load kubeconfig: %w", err)
	}
	restCfg.UserAgent = topology.SchedulerName
	restCfg.QPS, restCfg.Burst = float32(o.apiQPS), o.apiBurst
	restCfg.ContentType = o.apiContentType
	restCfg.AcceptContentTypes = o.apiContentType + "," + runtime.ContentTypeJSON
	client, err := kubernetes.NewForConfig(restCfg)
	if err != nil {
		return nil, nil, fmt.Errorf("create client: %w", err)
	}
	discoveryCfg := rest.CopyConfig(restCfg)
	discoveryCfg.Timeout = discoveryTimeout
	dc, err := discovery.NewDiscoveryClientForConfig(discoveryCfg)
	if err != nil {
		return nil, nil, fmt.Errorf("create discovery client: %w", err)
	}
	return client, dc, nil
}

// schedulerConfig is the scheduler's Config from the flags.
func (o *options) schedulerConfig(client kubernetes.Interface, metrics *scheduler.Metrics) scheduler.Config {
	return scheduler.Config{
		Client:            client,
		RecordNamespace:   o.recordNS,
		Tree:              topology.TreeConfig{LabelLevels: o.levels(), RequireAdminLabels: o.requireAdminLabels},
		DomainChannels:    o.domainChannels,
		FreeRoomInterval:  o.freeRoom,
		Metrics:           metrics,
		CommitParallelism: o.commitWorkers,
		CommitsInFlight:   o.commitsInFlight,
		Placement:         placement.Config{PackOrder: placement.PackOrder(o.packOrder), Budget: cost.Budget{Calls: o.budget.calls}, Spares: o.spares, LargeGangGPUs: o.largeGangGPUs},
		PlacementTime:     o.budget.time,

		DisablePreemption:    o.preemption.disabled,
		NominationTimeout:    o.preemption.nominationTimeout,
		PreemptionBudget:     o.preemption.budget,
		StarvationBound:      o.preemption.starvationBound,
		MaxUnschedulableWait: o.preemption.unschedulableWait,

		StarvationReservationsPerNamespace: o.preemption.reservationsPerNS,
		Replace:                            o.replace,
		TreePlaceCalls:                     o.treePlaceCalls,
	}
}

// compositesServed resolves --composite-pod-groups: auto and true ask
// discovery whether CompositePodGroups are served; true fails when they
// are not.
func (o *options) compositesServed(dc discovery.DiscoveryInterface) (bool, error) {
	if o.composites == "false" {
		return false, nil
	}
	list, err := dc.ServerResourcesForGroupVersion(schedulingv1alpha3.SchemeGroupVersion.String())
	served := err == nil && slices.ContainsFunc(list.APIResources, func(r metav1.APIResource) bool { return r.Name == "compositepodgroups" })
	if !served && o.composites == "true" {
		return false, fmt.Errorf("--composite-pod-groups=true: the apiserver does not serve compositepodgroups.%s (gate CompositePodGroup, --runtime-config=%s=true): %v",
			schedulingv1alpha3.SchemeGroupVersion, schedulingv1alpha3.SchemeGroupVersion, err)
	}
	return served, nil
}

// leaderElection is the Lease configuration from the flags.
func (o *options) leaderElection() (scheduler.LeaderElection, error) {
	id := o.leIdentity
	if id == "" {
		var err error
		if id, err = os.Hostname(); err != nil {
			return scheduler.LeaderElection{}, fmt.Errorf("leader election identity: %w", err)
		}
	}
	d := o.leDurations
	if d.renew >= d.lease || d.retry >= d.renew {
		return scheduler.LeaderElection{}, fmt.Errorf("leader election: want retry period (%s) < renew deadline (%s) < lease duration (%s)", d.retry, d.renew, d.lease)
	}
	return scheduler.LeaderElection{
		Namespace: o.leNamespace, Name: o.leName, Identity: id,
		LeaseDuration: d.lease, RenewDeadline: d.renew, RetryPeriod: d.retry,
	}, nil
}

// registry is the process's Prometheus registry: Go and process
// collectors, gpufabric_scheduler_build_info and client-go's metrics
// (workqueues, REST client, leader election; once per process, before
// any client exists).
func (o *options) registry() (*prometheus.Registry, error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if err := version.Register(reg, "scheduler", version.Get()); err != nil {
		return nil, err
	}
	var leases []string
	if o.leaderElect {
		leases = []string{o.leName}
	}
	if err := clientmetrics.Register(reg, clientmetrics.Options{Leases: leases}); err != nil {
		return nil, err
	}
	return reg, nil
}

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
