package sim

import (
	"cmp"
	"context"
	"fmt"

	"github.com/gpufabric/gpufabric/pkg/gang/placement"
	"github.com/gpufabric/gpufabric/pkg/sim/fabric"
)

// Cluster is one policy's view of the cluster: free GPUs per node (index
// into Fabric.NodeNames).
type Cluster struct {
	Fabric    *fabric.Fabric
	Free      []int
	FreeTotal int
	// down nodes (failure runs) have no free GPUs and get none back.
	down []bool
}

// NewCluster returns the cluster with only the fabric's existing load.
func NewCluster(f *fabric.Fabric) *Cluster {
	c := &Cluster{Fabric: f, Free: make([]int, len(f.GPUs))}
	for i, g := range f.GPUs {
		c.Free[i] = max(0, g-f.Busy[i])
		c.FreeTotal += c.Free[i]
	}
	return c
}

func (c *Cluster) take(node, gpus int) error {
	if c.Free[node] < gpus {
		return fmt.Errorf("node %s: %d GPUs free, %d taken", c.Fabric.NodeNames[node], c.Free[node], gpus)
	}
	c.Free[node] -= gpus
	c.FreeTotal -= gpus
	return nil
}

func (c *Cluster) give(node, gpus int) {
	if c.down != nil && c.down[node] {
		return
	}
	c.Free[node] += gpus
	c.FreeTotal += gpus
}

// domainPods is how many pods of gpus GPUs each fit in a domain.
func (c *Cluster) domainPods(d fabric.Domain, gpus int) int {
	n := 0
	for _, i := range d.Nodes {
		n += c.Free[i] / gpus
	}
	return n
}

// domainFree is the free GPUs of a domain.
func (c *Cluster) domainFree(d fabric.Domain) int {
	n := 0
	for _, i := range d.Nodes {
		n += c.Free[i]
	}
	return n
}

// nvlinkRoom reports whether one NVLink domain could hold all pods of g,
// counting the GPUs the gang already holds (nodes ≥ 0) as free for it.
func (c *Cluster) nvlinkRoom(g TraceGang, nodes []int) bool {
	if g.GPUs() > c.Fabric.MaxNVLinkGPUs {
		return false
	}
	held := map[int]int{}
	for _, n := range nodes {
		if n >= 0 {
			held[n] += g.GPUsPerPod
		}
	}
	for _, d := range c.Fabric.Domains[0] {
		pods := 0
		for _, i := range d.Nodes {
			pods += (c.Free[i] + held[i]) / g.GPUsPerPod
		}
		if pods >= g.Pods {
			return true
		}
	}
	return false
}

// Policy decides placements on its own Cluster.
type Policy interface {
	Name() string
	// PodByPod says the policy may place some pods of a gang and not
	// others; the simulator then holds the placed pods (see sim.go).
	PodByPod() bool
	// Place gets the node of each pod of g (-1: not placed yet) and returns
	// the nodes of all pods, where entries ≥ 0 are kept, or nil when it
	// places nothing. A gang policy places all pods or none. The simulator
	// applies the result to c; Place must not change c.
	Place(ctx context.Context, c *Cluster, g TraceGang, nodes []int) ([]int, error)
	// Release says the pods of gang id left their nodes.
	Release(ctx context.Context, id int) error
}

// Syncer is a Policy that prepares its own state before a Place (the
// engine rebuilds its snapshot after departures). The simulator times Sync
// apart from Place.
type Syncer interface {
	// Sync reports whether it rebuilt anything.
	Sync(ctx context.Context) (bool, error)
}

// PolicyNames are the policies NewPolicy knows, in report order.
func PolicyNames() []string {
	return []string{PolicyGPUFabric, PolicyGPUFabricNVLink, PolicyGPUFabricReserve, PolicyGPUFabricFullest, PolicyFirstFit, PolicyTAS, PolicyBestFit}
}

// Policy names.
const (
	PolicyGPUFabric       = "gpufabric"
	PolicyGPUFabricNVLink = "gpufabric-nvlink-required"
	// PolicyGPUFabricReserve is gpufabric with a starvation bound
	// (PolicyOptions.StarvationBound, default DefaultStarvationBound).
	PolicyGPUFabricReserve = "gpufabric-reserve"
	// PolicyGPUFabricFullest is gpufabric with the scheduler's
	// --pack-order=fullest-nodes (placement.PackFullestNodes).
	PolicyGPUFabricFullest = "gpufabric-fullest-nodes"
	PolicyFirstFit         = "pod-first-fit"
	PolicyTAS              = "kube-tas-mostallocated"
	PolicyBestFit          = "kueue-tas-bestfit"
)

// PolicyOptions configure NewPolicy.
type PolicyOptions struct {
	// Key is the single node-label level of the TAS and BestFit baselines.
	Key string
	// BestKey, when set, also runs the TAS and BestFit baselines at every
	// label level of the fabric and reports the best (most busy GPUs, then
	// gangs placed) as the headline row, the Key variant beside it.
	BestKey bool
	// StarvationBound of gpufabric-reserve, seconds; 0: the default.
	StarvationBound int64
}

// keyed reports whether a policy takes PolicyOptions.Key.
func keyed(name string) bool { return name == PolicyTAS || name == PolicyBestFit }

// NewPolicy returns a fresh policy by name for fabric f.
func NewPolicy(name string, f *fabric.Fabric, opt PolicyOptions) (Policy, error) {
	switch name {
	case PolicyGPUFabric:
		return NewEnginePolicy(f), nil
	case PolicyGPUFabricNVLink:
		e := NewEnginePolicy(f)
		e.RequireNVLink = true
		return e, nil
	case PolicyGPUFabricFullest:
		e := NewEnginePolicy(f)
		e.cfg.PackOrder = placement.PackFullestNodes
		return e, nil
	case PolicyGPUFabricReserve:
		e := NewEnginePolicy(f)
		e.Starvation = cmp.Or(opt.StarvationBound, DefaultStarvationBound)
		e.starve = newSimStarvation()
		return reservingEngine{e}, nil
	case PolicyFirstFit:
		return firstFit{}, nil
	case PolicyTAS, PolicyBestFit:
		l := f.Level(opt.Key)
		if l < 0 {
			return nil, fmt.Errorf("policy %s: level %q not in fabric levels %v", name, opt.Key, f.Levels)
		}
		if name == PolicyTAS {
			return mostAllocated{level: l, key: opt.Key}, nil
		}
		return bestFit{level: l, key: opt.Key}, nil
	}
	return nil, fmt.Errorf("unknown policy %q", name)
}
