package freeroom

import (
	"context"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/gpufabric/gpufabric/pkg/gang/placement/spares"
	"github.com/gpufabric/gpufabric/pkg/topology"
)

// TreeSource gives the fabric tree of the nodes and their slices
// (ListerTree).
type TreeSource interface {
	Tree() (*topology.Tree, error)
}

// fieldManager owns the view's fields (server-side apply).
const fieldManager = "gpufabric-scheduler"

// refreshTicks: the view is recomputed at least every this many
// intervals, even without a change (assumed decisions age out without an
// event).
const refreshTicks = 10

// Config of Run.
type Config struct {
	Client kubernetes.Interface
	// Namespace of the ConfigMap: the scheduler's own.
	Namespace string
	// Interval is the least time between two writes, and how often the
	// view is recomputed when something changed.
	Interval time.Duration
	// FreeGPUs per NVLink domain (every domain with a GPU, 0 when none is
	// free): the scheduler's, as its metrics.
	FreeGPUs func() (map[string]int, error)
	// Changes counts the events that can change the free GPUs or the tree
	// (claims, slices, nodes): the view is recomputed only when it moved,
	// or every refreshTicks intervals anyway.
	Changes func() uint64
	Tree    TreeSource
	// Fence, when set, returns an error while this replica may not hold
	// the Lease: nothing is written then.
	Fence func() error
	// Owner, when set, returns the view's owner (nil: none), so that the
	// garbage collector deletes the view with it (ClassOwner).
	Owner func() *metav1.OwnerReference
	// Spares is the scheduler's spare-node policy; with PerDomain > 0
	// and NodeGPUs set, the kept spares' GPUs are taken off the free ones
	// and summed in View.Spares.
	Spares   spares.Policy
	NodeGPUs NodeGPUsSource
	// Options of Build.
	Options Options
	// Now is the clock; time.Now when nil.
	Now func() time.Time
}

// Run publishes the view until ctx is done: at start, then at most once
// per Interval and only when the counts changed (a view that differs only
// in its time is not written). A failed write is retried at the next
// tick; nothing here stops the scheduler.
func Run(ctx context.Context, cfg Config) {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	logger := klog.FromContext(ctx).WithValues("configMap", klog.KRef(cfg.Namespace, ConfigMapName))
	t := time.NewTicker(cfg.Interval)
	defer t.Stop()
	p := &publisher{cfg: cfg}
	for tick := 0; ; tick++ {
		if err := p.step(ctx, tick); err != nil && ctx.Err() == nil {
			logger.Error(err, "Publishing the free-room view")
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// publisher is the state of one Run: the last view written and the
// change count it was computed at.
type publisher struct {
	cfg     Config
	written *View
	seen    uint64
	// computed: seen is valid.
	computed bool
}

// step recomputes the view when something changed since the last
// step that ended with the view written (or every refreshTicks), and
// writes it when its counts differ from the last written.
func (p *publisher) step(ctx context.Context, tick int) error {
	n := p.cfg.Changes()
	if p.computed && n == p.seen && tick%refreshTicks != 0 && p.written != nil {
		return nil
	}
	free, err := p.cfg.FreeGPUs()
	if err != nil {
		return fmt.Errorf("free GPUs: %w", err)
	}
	tree, err := p.cfg.Tree.Tree()
	if err != nil {
		return fmt.Errorf("fabric tree: %w", err)
	}
	sum, err := p.takeSpares(tree, free)
	if err != nil {
		return err
	}
	v := Build(tree, free, p.cfg.Now(), p.cfg.Options)
	v.Spares = sum
	if !SameCounts(v, p.written) {
		if err := p.write(ctx, v); err != nil {
			return err // seen unchanged: the next step computes and writes again
		}
		p.written = v
	}
	p.seen, p.computed = n, true
	return nil
}

// takeSpares takes the kept spares' GPUs off free (per NVLink domain) and
// returns the view's summary of them; nothing without a policy.
func (p *publisher) takeSpares(tree *topology.Tree, free map[string]int) (*Spares, error) {
	if p.cfg.Spares.PerDomain <= 0 || p.cfg.NodeGPUs == nil {
		return nil, nil
	}
	gpus, err := p.cfg.NodeGPUs.NodeGPUs()
	if err != nil {
		return nil, fmt.Errorf("spares: %w", err)
	}
	kept, sum := keptSpares(tree, p.cfg.Spares, gpus)
	for d, n := range kept {
		free[d] = max(0, free[d]-n)
	}
	return sum, nil
}

// write applies the view to the ConfigMap (created when missing).
func (p *publisher) write(ctx context.Context, v *View) error {
	data, err := Encode(v)
	if err != nil {
		return err
	}
	if p.cfg.Fence != nil {
		if err := p.cfg.Fence(); err != nil {
			return fmt.Errorf("not written: %w", err)
		}
	}
	cm := corev1ac.ConfigMap(ConfigMapName, p.cfg.Namespace).
		WithLabels(map[string]string{"app.kubernetes.io/managed-by": fieldManager, "app.kubernetes.io/component": "free-room"}).
		WithData(map[string]string{DataKey: string(data)})
	if p.cfg.Owner != nil {
		if o := p.cfg.Owner(); o != nil {
			cm.WithOwnerReferences(metav1ac.OwnerReference().WithAPIVersion(o.APIVersion).WithKind(o.Kind).WithName(o.Name).WithUID(o.UID))
		}
	}
	_, err = p.cfg.Client.CoreV1().ConfigMaps(p.cfg.Namespace).Apply(ctx, cm, metav1.ApplyOptions{FieldManager: fieldManager, Force: true})
	if err != nil {
		return fmt.Errorf("apply ConfigMap %s/%s: %w", p.cfg.Namespace, ConfigMapName, err)
	}
	klog.FromContext(ctx).V(4).Info("Published the free-room view", "freeGPUs", v.FreeGPUs, "gpus", v.GPUs)
	return nil
}
