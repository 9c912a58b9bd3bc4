// Package domains publishes the cluster-level fabric-domain pools: one
// ResourceSlice pool per NVLink domain, with channel devices whose pool
// NodeSelector selects exactly that domain's nodes. It follows the node-local
// slices of driver gpufabric.dev: nodes joining and leaving, GPUs tainted,
// domains that disappear (their pools are deleted).
//
// The desired state is computed by topology.FabricDomainPools (pure); this
// package is the thin adapter that feeds it from an informer and writes
// through resourceslice.Controller. The pools are owned by the DeviceClass
// fabric-domain.gpufabric.dev, so they go with an uninstall (owner.go).
//
// Files: publisher.go (Publisher, sync), owner.go (the pools' owner).
package domains

import (
	"context"
	"fmt"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	resourcelisters "k8s.io/client-go/listers/resource/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/klog/v2"

	"github.com/gpufabric/gpufabric/pkg/topology"
)

// Config of a Publisher.
type Config struct {
	Client kubernetes.Interface
	// Slices is the shared ResourceSlice informer (all drivers).
	Slices cache.SharedIndexInformer
	// Nodes is the shared Node informer: pools select nodes by their
	// kubernetes.io/hostname label. Optional: without it, node names are used.
	Nodes cache.SharedIndexInformer
	// Channels per domain: how many PodGroups can hold a domain at once.
	Channels int
	// OnChange, if set, is called with the desired pools after each change.
	OnChange func([]topology.DomainPool)
	// RequireAdminLabels is topology.TreeConfig's: with Nodes, a node the
	// scheduler's tree refuses (topology.CheckNodeDomain) is in no pool.
	RequireAdminLabels bool
}

// Publisher keeps the fabric-domain pools in sync. Safe for concurrent use.
type Publisher struct {
	cfg    Config
	lister resourcelisters.ResourceSliceLister
	nodes  corelisters.NodeLister
	ctrl   *resourceslice.Controller
	queue  workqueue.TypedRateLimitingInterface[string]
	// owner of the pools' slices (owner.go); nil: none.
	owner *resourceslice.Owner

	mu      sync.Mutex
	current []topology.DomainPool
	synced  bool // the first sync ran: current is the desired state
}

const syncKey = "pools"

// Start runs the publisher until ctx is done. The informer must be started
// by the caller; the publisher waits for it to sync before publishing, so
// it never deletes pools from an incomplete view.
func Start(ctx context.Context, cfg Config) (*Publisher, error) {
	if cfg.Channels < 1 || cfg.Channels > 128 {
		return nil, fmt.Errorf("channels per domain must be 1..128, got %d", cfg.Channels)
	}
	owner := ownerClass(ctx, cfg)
	ctrl, err := resourceslice.StartController(ctx, resourceslice.Options{
		DriverName: topology.DriverName,
		KubeClient: cfg.Client,
		Owner:      owner,
		Resources:  nil, // published once the informer has synced
	})
	if err != nil {
		return nil, fmt.Errorf("start resource slice controller: %w", err)
	}
	p := &Publisher{
		cfg:    cfg,
		lister: resourcelisters.NewResourceSliceLister(cfg.Slices.GetIndexer()),
		ctrl:   ctrl,
		owner:  owner,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "fabric_domain_pools"}),
	}
	enqueue := func(obj any) {
		if s, ok := obj.(*resourceapi.ResourceSlice); !ok || (s.Spec.Driver == topology.DriverName && s.Spec.NodeName != nil) {
			p.queue.Add(syncKey) // tombstones and our node-local slices
		}
	}
	if _, err := cfg.Slices.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj any) { enqueue(obj) },
		DeleteFunc: enqueue,
	}); err != nil {
		ctrl.Stop()
		return nil, fmt.Errorf("watch resource slices: %w", err)
	}
	if cfg.Nodes != nil {
		p.nodes = corelisters.NewNodeLister(cfg.Nodes.GetIndexer())
		hostnameChanged := func(old, obj any) {
			o, ok1 := old.(*v1.Node)
			n, ok2 := obj.(*v1.Node)
			if !ok1 || !ok2 || o.Labels[v1.LabelHostname] != n.Labels[v1.LabelHostname] || o.Labels[topology.LabelAdminNVLinkDomain] != n.Labels[topology.LabelAdminNVLinkDomain] {
				p.queue.Add(syncKey)
			}
		}
		if _, err := cfg.Nodes.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    func(any) { p.queue.Add(syncKey) },
			UpdateFunc: hostnameChanged,
		}); err != nil {
			ctrl.Stop()
			return nil, fmt.Errorf("watch nodes: %w", err)
		}
	}
	go p.run(ctx)
	return p, nil
}

func (p *Publisher) run(ctx context.Context) {
	logger := klog.FromContext(ctx)
	defer p.ctrl.Stop()
	defer p.queue.ShutDown()
	synced := []cache.InformerSynced{p.cfg.Slices.HasSynced}
	if p.cfg.Nodes != nil {
		synced = append(synced, p.cfg.Nodes.HasSynced)
	}
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		return
	}
	if err := p.adopt(ctx); err != nil {
		logger.Error(err, "Adopting fabric-domain slices failed; they may outlive an uninstall")
	}
	p.queue.Add(syncKey)
	go func() {
		<-ctx.Done()
		p.queue.ShutDown()
	}()
	for {
		key, quit := p.queue.Get()
		if quit {
			return
		}
		if err := p.sync(ctx); err != nil {
			logger.Error(err, "Syncing fabric-domain pools, will retry")
			p.queue.AddRateLimited(key)
		} else {
			p.queue.Forget(key)
		}
		p.queue.Done(key)
	}
}

func (p *Publisher) sync(ctx context.Context) error {
	slices, err := p.lister.List(labels.Everything())
	if err != nil {
		return fmt.Errorf("list resource slices: %w", err)
	}
	pools := topology.TrustedFabricDomainPools(slices, p.hostname, p.cfg.Channels, p.refused)
	p.mu.Lock()
	changed := !p.synced || !equality.Semantic.DeepEqual(pools, p.current)
	p.current, p.synced = pools, true
	p.mu.Unlock()
	if !changed {
		return nil
	}
	resources := &resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{}}
	for _, dp := range pools {
		resources.Pools[dp.Name] = resourceslice.Pool{
			NodeSelector: dp.NodeSelector,
			Slices:       []resourceslice.Slice{{Devices: dp.Devices}},
		}
	}
	p.ctrl.Update(resources)
	klog.FromContext(ctx).V(2).Info("Fabric-domain pools updated", "pools", len(pools))
	if p.cfg.OnChange != nil {
		p.cfg.OnChange(pools)
	}
	return nil
}

// Published reports whether the first sync ran and every pool it wants has
// a slice in the informer. Until then a gang whose shared claim needs a
// domain's channel would be refused for a pool that is only on its way.
func (p *Publisher) Published() bool {
	p.mu.Lock()
	pools, synced := p.current, p.synced
	p.mu.Unlock()
	if !synced {
		return false
	}
	slices, err := p.lister.List(labels.Everything())
	if err != nil {
		return false
	}
	seen := map[string]bool{}
	for _, s := range slices {
		if s.Spec.Driver == topology.DriverName && s.Spec.NodeName == nil {
			seen[s.Spec.Pool.Name] = true
		}
	}
	for _, dp := range pools {
		if !seen[dp.Name] {
			return false
		}
	}
	return true
}

// WaitPublished waits, at most timeout, until Published; it reports whether
// the pools were seen (a scheduler goes on without them after the timeout:
// the pools' slices then arrive as any slice does).
func (p *Publisher) WaitPublished(ctx context.Context, timeout time.Duration) bool {
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		return p.Published(), nil
	})
	return err == nil
}

// hostname returns a node's kubernetes.io/hostname label, "" if unknown.
func (p *Publisher) hostname(node string) string {
	if p.nodes == nil {
		return ""
	}
	n, err := p.nodes.Get(node)
	if err != nil {
		return ""
	}
	return n.Labels[v1.LabelHostname]
}

// refused reports whether the scheduler's tree leaves the node out
// (topology.CheckNodeDomain on its labels; none without the Node
// informer).
func (p *Publisher) refused(node string, info topology.NodeGPUInfo) bool {
	if p.nodes == nil {
		return false
	}
	var labels map[string]string
	if n, err := p.nodes.Get(node); err == nil {
		labels = n.Labels
	}
	return topology.CheckNodeDomain(node, labels, info, p.cfg.RequireAdminLabels) != nil
}

// Pools returns the desired pools last published (a copy).
func (p *Publisher) Pools() []topology.DomainPool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]topology.DomainPool(nil), p.current...)
}
