package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"

	"github.com/gpufabric/gpufabric/pkg/component/clientmetrics"
	"github.com/gpufabric/gpufabric/pkg/component/delegatedauth"
	"github.com/gpufabric/gpufabric/pkg/component/healthz"
	"github.com/gpufabric/gpufabric/pkg/component/secureserving"
	"github.com/gpufabric/gpufabric/pkg/component/version"
	"github.com/gpufabric/gpufabric/pkg/workloads/grouper"
	"github.com/gpufabric/gpufabric/pkg/workloads/grouping"
)

var errLostLeadership = errors.New("lost leadership")

// run wires the clients, the metrics and health port and leader
// election, and groups workloads until ctx is done.
func (o *options) run(ctx context.Context) error {
	restCfg, err := o.restConfig()
	if err != nil {
		return fmt.Errorf("load kubeconfig: %w", err)
	}
	restCfg.UserAgent = grouper.Name
	restCfg.QPS, restCfg.Burst = float32(o.apiQPS), o.apiBurst
	cfg, err := o.grouperConfig(restCfg)
	if err != nil {
		return err
	}
	g, err := grouper.New(cfg)
	if err != nil {
		return err
	}
	watchdog := leaderelection.NewLeaderHealthzAdaptor(20 * time.Second)
	if err := o.serve(ctx, restCfg, g, watchdog); err != nil {
		return err
	}
	if !o.leaderElect {
		return g.Run(ctx)
	}
	return o.lead(ctx, cfg.Client, watchdog, g.Run)
}

func (o *options) grouperConfig(restCfg *rest.Config) (grouper.Config, error) {
	client, err := kubernetes.NewForConfig(restCfg)
	if err != nil {
		return grouper.Config{}, fmt.Errorf("create client: %w", err)
	}
	dyn, err := dynamic.NewForConfig(restCfg)
	if err != nil {
		return grouper.Config{}, fmt.Errorf("create dynamic client: %w", err)
	}
	meta, err := metadata.NewForConfig(restCfg)
	if err != nil {
		return grouper.Config{}, fmt.Errorf("create metadata client: %w", err)
	}
	dcCfg := rest.CopyConfig(restCfg)
	dcCfg.Timeout = 10 * time.Second
	dc, err := discovery.NewDiscoveryClientForConfig(dcCfg)
	if err != nil {
		return grouper.Config{}, fmt.Errorf("create discovery client: %w", err)
	}
	mode := grouping.ModeFlat
	if o.composite {
		mode = grouping.ModeComposite
	}
	return grouper.Config{Client: client, Dynamic: dyn, Metadata: meta, Discovery: dc, Mode: mode, JobControllerGrace: o.jobGrace, Workers: o.workers}, nil
}

// serve serves /metrics and the health endpoints on --metrics-address:
// /livez (a leader that stopped renewing), /readyz (also: the informers
// synced and the served kinds were discovered once).
func (o *options) serve(ctx context.Context, restCfg *rest.Config, g *grouper.Grouper, watchdog *leaderelection.HealthzAdaptor) error {
	if o.metricsAddress == "" {
		return nil
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if err := version.Register(reg, "grouper", version.Get()); err != nil {
		return err
	}
	var leases []string
	if o.leaderElect {
		leases = []string{o.leName}
	}
	if err := clientmetrics.Register(reg, clientmetrics.Options{Leases: leases}); err != nil {
		return err
	}
	leader := healthz.NamedCheck("leaderElection", watchdog.Check)
	synced := healthz.NamedCheck("informer-sync", func(*http.Request) error {
		if !g.Synced() {
			return errors.New("informers not synced yet")
		}
		return nil
	})
	h, err := healthz.New(klog.FromContext(ctx).WithName("health"), []healthz.Checker{healthz.Ping, leader}, []healthz.Checker{healthz.Ping, leader, synced})
	if err != nil {
		return err
	}
	auth, err := delegatedauth.NewForConfig(restCfg, delegatedauth.Config{AlwaysAllowPaths: delegatedauth.DefaultAlwaysAllowPaths, Logger: klog.FromContext(ctx).WithName("endpoints")})
	if err != nil {
		return fmt.Errorf("metrics port authorization: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	h.Install(mux)
	_, err = secureserving.Serve(ctx, secureserving.Config{Address: o.metricsAddress, CertFile: o.certFile, KeyFile: o.keyFile, Name: grouper.Name, Handler: auth.Wrap(mux)})
	return err
}

// lead runs f while this replica holds the Lease; losing it ends the
// process (errLostLeadership), which starts over with fresh informers.
func (o *options) lead(ctx context.Context, client kubernetes.Interface, watchdog *leaderelection.HealthzAdaptor, f func(context.Context) error) error {
	id := o.leIdentity
	if id == "" {
		var err error
		if id, err = os.Hostname(); err != nil {
			return fmt.Errorf("leader election identity: %w", err)
		}
	}
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: o.leNamespace, Name: o.leName},
		Client:     client.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: id},
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	elector, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock: lock, Name: o.leName, WatchDog: watchdog, ReleaseOnCancel: true,
		LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context) { done <- f(ctx) },
			OnStoppedLeading: func() {
				select {
				case done <- errLostLeadership:
				default:
				}
			},
		},
	})
	if err != nil {
		return fmt.Errorf("leader election: %w", err)
	}
	go elector.Run(ctx)
	select {
	case err := <-done:
		if ctx.Err() != nil {
			return nil
		}
		if err == nil {
			return errLostLeadership
		}
		return err
	case <-ctx.Done():
		return nil
	}
}
