package grouper

import (
	"context"
	"fmt"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/gpufabric/gpufabric/pkg/gang/report"
	"github.com/gpufabric/gpufabric/pkg/workloads/grouping"
)

// Name is the grouper's name in events, its field manager and user agent.
const Name = "gpufabric-grouper"

// Config of a Grouper. Client, Dynamic, Metadata and Discovery are
// required.
type Config struct {
	Client    kubernetes.Interface
	Dynamic   dynamic.Interface
	Metadata  metadata.Interface
	Discovery discovery.DiscoveryInterface
	// Mode: flat (default) or composite (CompositePodGroups, when
	// scheduling.k8s.io/v1alpha3 is served; else flat).
	Mode grouping.Mode
	// JobControllerGrace: a root Indexed Job younger than this is left to
	// the Job controller (gate WorkloadWithJob), which makes its gang when
	// it runs; after it, without a Workload of the Job controller's, the
	// grouper makes it. Default 5s.
	JobControllerGrace time.Duration
	// Workers reconcile workloads in parallel. Default 2.
	Workers int
	// DiscoveryInterval: how often the served kinds are checked again
	// (a CRD installed or removed later). Default 1m.
	DiscoveryInterval time.Duration
	// Resync of the informers. Default 10m: a group deleted by hand is
	// made again at the latest then (its delete event re-queues sooner).
	Resync time.Duration
}

func (c Config) withDefaults() (Config, error) {
	if c.Client == nil || c.Dynamic == nil || c.Metadata == nil || c.Discovery == nil {
		return c, fmt.Errorf("grouper: Client, Dynamic, Metadata and Discovery are required")
	}
	switch c.Mode {
	case "":
		c.Mode = grouping.ModeFlat
	case grouping.ModeFlat, grouping.ModeComposite:
	default:
		return c, fmt.Errorf("grouper: mode %q is not %q or %q", c.Mode, grouping.ModeFlat, grouping.ModeComposite)
	}
	if c.JobControllerGrace <= 0 {
		c.JobControllerGrace = 5 * time.Second
	}
	if c.Workers <= 0 {
		c.Workers = 2
	}
	if c.DiscoveryInterval <= 0 {
		c.DiscoveryInterval = time.Minute
	}
	if c.Resync <= 0 {
		c.Resync = 10 * time.Minute
	}
	return c, nil
}

// key is a workload to reconcile.
type key struct {
	kind            grouping.Kind
	namespace, name string
}

func (k key) String() string { return fmt.Sprintf("%s %s/%s", k.kind, k.namespace, k.name) }

// Grouper makes and keeps the gangs of the workloads it watches.
type Grouper struct {
	cfg    Config
	queue  workqueue.TypedRateLimitingInterface[key]
	report *report.Reporter
	seen   *seen
	w      *watches

	mu     sync.Mutex
	synced bool
}

// New returns a Grouper; Run starts it.
func New(cfg Config) (*Grouper, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	g := &Grouper{
		cfg: cfg,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedMaxOfRateLimiter(
				workqueue.NewTypedItemExponentialFailureRateLimiter[key](200*time.Millisecond, 5*time.Minute),
				&workqueue.TypedBucketRateLimiter[key]{Limiter: newBucket()},
			), workqueue.TypedRateLimitingQueueConfig[key]{Name: "gpufabric_grouper"}),
		seen: newSeen(maxSeen),
	}
	g.w = newWatches(g)
	return g, nil
}

// Run watches the served kinds and reconciles until ctx is done.
func (g *Grouper) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx).WithName("grouper")
	ctx = klog.NewContext(ctx, logger)
	broadcaster := events.NewBroadcaster(&events.EventSinkImpl{Interface: g.cfg.Client.EventsV1()})
	broadcaster.StartRecordingToSink(ctx.Done())
	defer broadcaster.Shutdown()
	g.report = report.New(broadcaster.NewRecorder(scheme.Scheme, Name))
	defer g.queue.ShutDown()
	if err := g.w.startBase(ctx); err != nil {
		return err
	}
	go wait.UntilWithContext(ctx, g.w.discover, g.cfg.DiscoveryInterval)
	for range g.cfg.Workers {
		go wait.UntilWithContext(ctx, g.worker, time.Second)
	}
	logger.Info("Grouping workloads", "mode", g.cfg.Mode, "workers", g.cfg.Workers)
	<-ctx.Done()
	return nil
}

// Synced reports whether the base informers synced and the served kinds
// were discovered once (readiness).
func (g *Grouper) Synced() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.synced
}

func (g *Grouper) setSynced() {
	g.mu.Lock()
	g.synced = true
	g.mu.Unlock()
}

func (g *Grouper) worker(ctx context.Context) {
	for g.next(ctx) {
	}
}

func (g *Grouper) next(ctx context.Context) bool {
	k, quit := g.queue.Get()
	if quit {
		return false
	}
	defer g.queue.Done(k)
	after, err := g.reconcile(ctx, k)
	switch {
	case err != nil:
		klog.FromContext(ctx).V(2).Info("Reconcile failed, retrying", "workload", k.String(), "err", err)
		g.queue.AddRateLimited(k)
	case after > 0:
		g.queue.Forget(k)
		g.queue.AddAfter(k, after)
	default:
		g.queue.Forget(k)
	}
	return true
}

func (g *Grouper) enqueue(k key) { g.queue.Add(k) }
