package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"

	"github.com/gpufabric/gpufabric/pkg/claims"
	"github.com/gpufabric/gpufabric/pkg/component/clientmetrics"
	"github.com/gpufabric/gpufabric/pkg/component/version"
	"github.com/gpufabric/gpufabric/pkg/devices"
	"github.com/gpufabric/gpufabric/pkg/topology"
)

// runPlugin runs the kubelet plugin until ctx is done: discovers the node,
// publishes its pool, serves the kubelet over the DRA and registration
// sockets, and re-discovers every health interval.
func runPlugin(ctx context.Context, args []string, _ io.Writer) error {
	var o runOptions
	if err := o.flags(args); err != nil {
		return err
	}
	logger := klog.FromContext(ctx).WithValues("node", o.node)
	logger.Info("Starting gpufabric kubelet plugin", version.Get().KeysAndValues()...)
	ctx, cancel := context.WithCancelCause(klog.NewContext(ctx, logger))
	defer cancel(nil)
	registry, err := newRegistry()
	if err != nil {
		return err
	}
	restCfg, err := clientcmd.BuildConfigFromFlags("", o.kubeconfig)
	if err != nil {
		return fmt.Errorf("load kubeconfig: %w", err)
	}
	client, err := kubernetes.NewForConfig(restCfg)
	if err != nil {
		return fmt.Errorf("create client: %w", err)
	}
	if o.backend == "mock" {
		defer os.RemoveAll(o.mockDir)
	}
	pr := &probes{}
	if o.metricsAddress != "" {
		hh, err := pr.handler(logger.WithName("health"))
		if err != nil {
			return err
		}
		if _, err := serveHTTP(ctx, o.metricsAddress, &o.serving, restCfg, registry, hh); err != nil {
			return err
		}
	}
	p, err := newPlugin(ctx, &o, client, registry, func(err error) { cancel(err) }, kubeletplugin.GRPCInterceptor(pr.interceptor))
	if err != nil {
		return err
	}
	defer p.helper.Stop()
	pr.started(&o)
	events := make(chan devices.Event, 64)
	go p.watchEvents(ctx, p.monitor, events)
	p.loop(ctx, o.healthInterval, events)
	if err := context.Cause(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

// helperOptions are the kubeletplugin options from the flags.
func (o *runOptions) helperOptions(client kubernetes.Interface, extra ...kubeletplugin.Option) []kubeletplugin.Option {
	opts := []kubeletplugin.Option{
		kubeletplugin.DriverName(topology.DriverName),
		kubeletplugin.KubeClient(client),
		kubeletplugin.NodeName(o.node),
		kubeletplugin.PluginDataDirectoryPath(o.pluginDir),
		kubeletplugin.RegistrarDirectoryPath(o.registrarDir),
		kubeletplugin.GRPCVerbosity(5),
	}
	if o.podUID != "" {
		opts = append(opts, kubeletplugin.RollingUpdate(types.UID(o.podUID)))
	}
	return append(opts, extra...)
}

// newRegistry is the process's Prometheus registry: Go and process
// collectors, gpufabric_kubelet_plugin_build_info and client-go's metrics
// (once per process, before the helper's workqueues exist).
func newRegistry() (*prometheus.Registry, error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if err := version.Register(reg, "kubelet_plugin", version.Get()); err != nil {
		return nil, err
	}
	if err := clientmetrics.Register(reg, clientmetrics.Options{}); err != nil {
		return nil, err
	}
	return reg, nil
}

// discover runs discovery once with a fresh backend (the mock backend
// re-reads its fabric file, so injected faults show up).
func (o *runOptions) discover(ctx context.Context, opts ...devices.Option) (*devices.Inventory, devices.Backend, error) {
	newBackend := o.newBackend
	if o.backend == "mock" {
		// The mock writes a fresh fake tree at the same paths each time, so
		// device node paths in CDI specs stay valid; it swaps the new tree
		// in, so readers (the IMEX status) never find it missing.
		newBackend = o.refreshMock
	}
	b, err := newBackend()
	if err != nil {
		return nil, nil, err
	}
	inv, err := devices.Discover(ctx, b, o.node, append(opts, devices.WithMIG(devices.MIGMode(o.mig)))...)
	if err != nil {
		return nil, nil, fmt.Errorf("discover node %s: %w", o.node, err)
	}
	return inv, b, nil
}

// channelResolver checks channels against the node's own NVLink domain and,
// with --imex-channels=managed, hands out the IMEX channels the driver
// offers once the node's IMEX daemon (asked through the backend) is ready.
func (o *runOptions) channelResolver(inv *devices.Inventory, b devices.Backend) claims.ChannelResolver {
	r := claims.FabricChannelResolver{LocalDomainID: localDomain(inv)}
	if o.imex.channels == "managed" {
		r.IMEX = &claims.IMEX{
			Major: inv.IMEX.Major, Channels: inv.IMEX.Channels, ReadyTimeout: o.imex.readyTimeout,
			Ready: func(ctx context.Context) (bool, string, error) {
				status, err := b.IMEXStatus(ctx)
				return err == nil && status == devices.IMEXReady, status, err
			},
		}
	}
	return r
}

// socketPaths are where kubeletplugin.Start listens with these options
// (its naming: dra[-<pod UID>].sock in the plugin dir; <driver>-reg.sock,
// or the rolling-update name, in the registrar dir).
func (o *runOptions) socketPaths() (dra, registration string) {
	uid := ""
	reg := topology.DriverName + "-reg.sock"
	if o.podUID != "" {
		uid = "-" + o.podUID
		reg = kubeletplugin.RollingUpdateRegistrarSocketFile(o.registrarDir, topology.DriverName, types.UID(o.podUID))
	}
	return filepath.Join(o.pluginDir, "dra"+uid+".sock"), filepath.Join(o.registrarDir, reg)
}
