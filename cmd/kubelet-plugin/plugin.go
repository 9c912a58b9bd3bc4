package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/klog/v2"

	"github.com/gpufabric/gpufabric/pkg/claims"
	"github.com/gpufabric/gpufabric/pkg/claims/node"
	"github.com/gpufabric/gpufabric/pkg/devices"
)

// plugin is one running kubelet plugin: the claim driver behind the
// kubelet's sockets, and the node's published pool.
type plugin struct {
	opts      *runOptions
	client    kubernetes.Interface
	registry  *prometheus.Registry
	resolver  *inventoryResolver
	driver    *node.Driver
	helper    *kubeletplugin.Helper
	health    chan kubeletplugin.DeviceHealthReport
	published *resourceslice.DriverResources
}

// newPlugin discovers the node, starts the claim driver and the kubelet
// sockets, and publishes the pool. onFatal is called for unrecoverable
// errors (it should stop the process).
func newPlugin(ctx context.Context, o *runOptions, client kubernetes.Interface, registry *prometheus.Registry, onFatal func(error)) (*plugin, error) {
	for _, dir := range []string{o.pluginDir, o.registrarDir, o.cdiRoot, o.stateDir} {
		if err := os.MkdirAll(dir, 0o750); err != nil {
			return nil, fmt.Errorf("create %s: %w", dir, err)
		}
	}
	inv, backend, err := o.discover(ctx)
	if err != nil {
		return nil, err
	}
	p := &plugin{
		opts: o, client: client, registry: registry,
		resolver: newInventoryResolver(backend.DevRoot(), inv),
		health:   make(chan kubeletplugin.DeviceHealthReport, 1),
	}
	p.driver, err = node.NewDriver(ctx, node.Config{
		NodeName:      o.node,
		CDIRoot:       o.cdiRoot,
		StateDir:      o.stateDir,
		BootIDPath:    o.bootIDPath,
		Resolver:      p.resolver,
		Channels:      channelResolver(inv, backend),
		ClaimGetter:   claimGetter{client},
		Registry:      p.registry,
		HealthUpdates: p.health,
		OnEvent:       p.recordEvent,
		OnFatalError:  onFatal,
	})
	if err != nil {
		return nil, fmt.Errorf("start claim driver: %w", err)
	}
	p.helper, err = kubeletplugin.Start(ctx, p.driver, o.helperOptions(client)...)
	if err != nil {
		return nil, fmt.Errorf("start kubelet plugin: %w", err)
	}
	if err := p.publish(ctx, inv); err != nil {
		p.helper.Stop()
		return nil, err
	}
	return p, nil
}

// loop re-discovers the hardware every interval until ctx is done.
func (p *plugin) loop(ctx context.Context, interval time.Duration) {
	logger := klog.FromContext(ctx)
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
		inv, _, err := p.opts.discover(ctx)
		if err != nil {
			// Keep serving what was discovered last; the node stays usable.
			logger.Error(err, "Re-discovering hardware failed, keeping the last inventory")
			continue
		}
		p.resolver.update(inv)
		if err := p.publish(ctx, inv); err != nil {
			logger.Error(err, "Publishing resources failed")
		}
	}
}

// publish sends the inventory's pool to the apiserver when it changed (the
// helper's controller then adds, updates or deletes slices, so devices that
// disappeared leave no stale entries) and reports device health.
func (p *plugin) publish(ctx context.Context, inv *devices.Inventory) error {
	p.sendHealth(inv)
	dr := inv.DriverResources()
	if p.published != nil && equality.Semantic.DeepEqual(dr, p.published) {
		return nil
	}
	if err := p.helper.PublishResources(ctx, *dr); err != nil {
		return fmt.Errorf("publish resources: %w", err)
	}
	p.published = dr
	klog.FromContext(ctx).Info("Published node resources", "gpus", len(inv.GPUs), "nics", len(inv.NICs), "tainted", taintedCount(inv))
	return nil
}

func (p *plugin) sendHealth(inv *devices.Inventory) {
	now := time.Now()
	var report kubeletplugin.DeviceHealthReport
	add := func(name string, taints []resourceapi.DeviceTaint) {
		h := kubeletplugin.HealthStatusHealthy
		if len(taints) > 0 {
			h = kubeletplugin.HealthStatusUnhealthy
		}
		report.Devices = append(report.Devices, kubeletplugin.DeviceHealth{
			PoolName: inv.NodeName, DeviceName: name, Health: h, LastUpdated: now,
			HealthCheckTimeout: 3 * p.opts.healthInterval,
		})
	}
	for _, g := range inv.GPUs {
		add(g.Name, g.Taints)
	}
	for _, n := range inv.NICs {
		add(n.Name, n.Taints)
	}
	select {
	case p.health <- report:
	default: // the driver has not taken the previous report; the next one follows
	}
}

func taintedCount(inv *devices.Inventory) int {
	n := 0
	for _, g := range inv.GPUs {
		if len(g.Taints) > 0 {
			n++
		}
	}
	for _, nic := range inv.NICs {
		if len(nic.Taints) > 0 {
			n++
		}
	}
	return n
}

// recordEvent turns a driver event into a Kubernetes Event on the Node, so
// an operator sees it with kubectl describe node.
func (p *plugin) recordEvent(ctx context.Context, ev node.Event) {
	logger := klog.FromContext(ctx)
	logger.Info("Driver event", "type", ev.Type, "reason", ev.Reason, "message", ev.Message)
	now := metav1.Now()
	e := &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{GenerateName: p.opts.node + ".", Namespace: metav1.NamespaceDefault},
		InvolvedObject: corev1.ObjectReference{Kind: "Node", Name: p.opts.node, UID: "", APIVersion: "v1"},
		Type:           ev.Type, Reason: ev.Reason, Message: ev.Message,
		Source:         corev1.EventSource{Component: "gpufabric-kubelet-plugin", Host: p.opts.node},
		FirstTimestamp: now, LastTimestamp: now, Count: 1,
	}
	if _, err := p.client.CoreV1().Events(metav1.NamespaceDefault).Create(ctx, e, metav1.CreateOptions{}); err != nil {
		logger.Error(err, "Recording event failed", "reason", ev.Reason)
	}
}

// claimGetter reads claims for the driver's state rebuild.
type claimGetter struct{ client kubernetes.Interface }

var _ claims.ClaimGetter = claimGetter{}

func (g claimGetter) GetClaim(ctx context.Context, namespace, name string) (*resourceapi.ResourceClaim, error) {
	return g.client.ResourceV1().ResourceClaims(namespace).Get(ctx, name, metav1.GetOptions{})
}
