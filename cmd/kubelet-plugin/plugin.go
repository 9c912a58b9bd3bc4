package main

import (
	"context"
	"fmt"
	"os"
	"strings"
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
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/gpufabric/gpufabric/pkg/claims"
	"github.com/gpufabric/gpufabric/pkg/claims/node"
	"github.com/gpufabric/gpufabric/pkg/devices"
	"github.com/gpufabric/gpufabric/pkg/gang/report"
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
	// inv is the last discovered inventory; events adds the taints of GPU
	// events to it before it is published.
	inv     *devices.Inventory
	events  *devices.EventTaints
	metrics *pluginMetrics
	// monitor is the backend whose NVML event set is watched.
	monitor devices.Backend
	rails   *railStore
	// excluded are the MIG-enabled GPUs not published, as last reported.
	excluded string
	// fabric keeps the link error counters' windows (fabric.go).
	fabric *fabricHealth
}

// newPlugin discovers the node, starts the claim driver and the kubelet
// sockets, and publishes the pool. onFatal is called for unrecoverable
// errors (it should stop the process); helperOpts are added to the
// kubelet helper's options.
func newPlugin(ctx context.Context, o *runOptions, client kubernetes.Interface, registry *prometheus.Registry, onFatal func(error), helperOpts ...kubeletplugin.Option) (*plugin, error) {
	for _, dir := range []string{o.pluginDir, o.registrarDir, o.cdiRoot, o.stateDir} {
		if err := os.MkdirAll(dir, 0o750); err != nil {
			return nil, fmt.Errorf("create %s: %w", dir, err)
		}
	}
	rails := newRailStore(ctx, o.stateDir)
	inv, backend, err := o.discover(ctx, rails.option())
	if err != nil {
		return nil, err
	}
	rails.remember(ctx, inv.Rails)
	p := &plugin{
		opts: o, client: client, registry: registry,
		resolver: newInventoryResolver(backend.DevRoot(), inv, devices.NewMIGManager(backend.NVML(), backend.ProcRoot())),
		health:   make(chan kubeletplugin.DeviceHealthReport, 1),
		inv:      inv, monitor: backend, rails: rails,
		fabric: newFabricHealth(o.fabric.config()),
	}
	p.fabric.observe(ctx, backend, inv, time.Now()) // the counters' baseline
	if p.metrics, err = newPluginMetrics(registry); err != nil {
		return nil, err
	}
	driverEdits, err := p.driverEdits(ctx, backend)
	if err != nil {
		return nil, err
	}
	p.driver, err = node.NewDriver(ctx, node.Config{
		DriverEdits:   driverEdits,
		NodeName:      o.node,
		CDIRoot:       o.cdiRoot,
		StateDir:      o.stateDir,
		BootIDPath:    o.bootIDPath,
		Resolver:      p.resolver,
		Channels:      o.channelResolver(inv, backend),
		ClaimGetter:   claimGetter{client},
		Registry:      p.registry,
		HealthUpdates: p.health,
		OnEvent:       p.recordEvent,
		OnFatalError:  onFatal,
	})
	if err != nil {
		return nil, fmt.Errorf("start claim driver: %w", err)
	}
	p.events = devices.NewEventTaints(o.stateDir, p.driver.BootID(), o.health.policy, true)
	p.helper, err = kubeletplugin.Start(ctx, p.driver, o.helperOptions(client, helperOpts...)...)
	if err != nil {
		return nil, fmt.Errorf("start kubelet plugin: %w", err)
	}
	if err := p.publish(ctx); err != nil {
		p.helper.Stop()
		return nil, err
	}
	p.reportExcluded(ctx)
	return p, nil
}

// driverEdits installs nvidia-cdi-hook when asked to and returns the
// driver's CDI edits for node.Config (nil with --cdi-driver=off). Edits that
// cannot be generated now are logged and reported with a Node event: claims
// with GPUs fail until they can.
func (p *plugin) driverEdits(ctx context.Context, backend devices.Backend) (func(context.Context) (*cdispec.ContainerEdits, error), error) {
	o := p.opts
	if o.cdi.hookSource != "" && o.cdi.driver == "nvcdi" {
		if err := installHook(o.cdi.hookSource, o.cdi.hookPath); err != nil {
			return nil, err
		}
	}
	files := o.newDriverFiles(backend, func() string { return p.resolver.inv.Load().DriverVersion })
	if files == nil {
		return nil, nil
	}
	if _, err := files.get(ctx); err != nil {
		klog.FromContext(ctx).Error(err, "The driver's CDI edits are unavailable; GPU claims fail until they are")
		p.recordEvent(ctx, node.Event{Type: corev1.EventTypeWarning, Reason: reasonDriverFilesMissing, Message: err.Error()})
	}
	return files.get, nil
}

// reportExcluded tells the operator, with a Node event, which MIG-enabled
// GPUs are not published and why, whenever that set changes.
func (p *plugin) reportExcluded(ctx context.Context) {
	var parts []string
	for _, g := range p.inv.MIGExcluded() {
		why := "--mig=exclude"
		if g.MIGError != "" {
			why = "MIG partitions unreadable: " + g.MIGError
		}
		parts = append(parts, fmt.Sprintf("%s (%s): %s", g.Name, g.UUID, why))
	}
	msg := strings.Join(parts, "; ")
	if msg == p.excluded {
		return
	}
	p.excluded = msg
	if msg != "" {
		p.recordEvent(ctx, node.Event{Type: corev1.EventTypeWarning, Reason: reasonMIGExcluded, Message: "MIG-enabled GPUs not published: " + msg})
	}
}

// loop applies GPU events as they come and re-discovers the hardware every
// interval, until ctx is done.
func (p *plugin) loop(ctx context.Context, interval time.Duration, events <-chan devices.Event) {
	logger := klog.FromContext(ctx)
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case ev := <-events:
			p.onEvent(ctx, ev)
			continue
		case <-ticker.C:
		}
		inv, b, err := p.opts.discover(ctx, p.rails.option())
		if err != nil && ctx.Err() != nil {
			return // stopped mid-discovery (SIGTERM): not a hardware failure
		}
		if err != nil {
			// Keep serving what was discovered last; the node stays usable.
			logger.Error(err, "Re-discovering hardware failed, keeping the last inventory")
			continue
		}
		p.rails.remember(ctx, inv.Rails)
		p.resolver.update(inv)
		p.inv = inv
		fabricEvents := p.fabric.observe(ctx, b, inv, time.Now())
		if err := p.publish(ctx); err != nil {
			logger.Error(err, "Publishing resources failed")
		}
		for _, ev := range fabricEvents {
			p.recordEvent(ctx, ev)
		}
		p.reportExcluded(ctx)
	}
}

// publish sends the pool, the last inventory with the taints of GPU events,
// to the apiserver when it changed (the helper's controller then adds,
// updates or deletes slices, so devices that disappeared leave no stale
// entries) and reports device health.
func (p *plugin) publish(ctx context.Context) error {
	taints, err := p.events.Load()
	if err != nil {
		// Corrupt: published without event taints until the next event
		// rewrites the file.
		klog.FromContext(ctx).Error(err, "Reading GPU event taints failed")
	}
	inv, fabricTainted := p.fabric.apply(p.inv.WithTaints(taints))
	p.metrics.fabricTainted.Set(float64(fabricTainted))
	dr := inv.DriverResources()
	p.sendHealth(dr)
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

// sendHealth reports every published device to the kubelet: Unhealthy
// with any taint, else Healthy.
func (p *plugin) sendHealth(dr *resourceslice.DriverResources) {
	now := time.Now()
	var report kubeletplugin.DeviceHealthReport
	for pool, pl := range dr.Pools {
		for _, s := range pl.Slices {
			for _, d := range s.Devices {
				h := kubeletplugin.HealthStatusHealthy
				if len(d.Taints) > 0 {
					h = kubeletplugin.HealthStatusUnhealthy
				}
				report.Devices = append(report.Devices, kubeletplugin.DeviceHealth{
					PoolName: pool, DeviceName: d.Name, Health: h, LastUpdated: now,
					HealthCheckTimeout: 3 * p.opts.healthInterval,
				})
			}
		}
	}
	// The only sender: if the driver has not taken the previous report,
	// replace it, so that the newest health is never dropped.
	select {
	case p.health <- report:
	default:
		select {
		case <-p.health:
		default:
		}
		p.health <- report
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
// an operator sees it with kubectl describe node. The message (it may
// quote a claim's content) is cut to report.MaxNote.
func (p *plugin) recordEvent(ctx context.Context, ev node.Event) {
	logger := klog.FromContext(ctx)
	logger.Info("Driver event", "type", ev.Type, "reason", ev.Reason, "message", ev.Message)
	now := metav1.Now()
	e := &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{GenerateName: p.opts.node + ".", Namespace: metav1.NamespaceDefault},
		InvolvedObject: corev1.ObjectReference{Kind: "Node", Name: p.opts.node, UID: "", APIVersion: "v1"},
		Type:           ev.Type, Reason: ev.Reason, Message: report.Truncate(ev.Message, report.MaxNote),
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
