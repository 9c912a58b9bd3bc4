package freeroom

import (
	"fmt"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/labels"
	corelisters "k8s.io/client-go/listers/core/v1"
	resourcelisters "k8s.io/client-go/listers/resource/v1"
	"k8s.io/dynamic-resource-allocation/structured"

	"github.com/gpufabric/gpufabric/pkg/gang/placement/spares"
	"github.com/gpufabric/gpufabric/pkg/topology"
)

// Spares is what the view says of the spare nodes the scheduler keeps
// for replacements (--spare-nodes-per-domain): the kept nodes' GPUs are
// not counted free, since no new gang may take them.
type Spares struct {
	// PerDomain nodes kept per domain of Level.
	PerDomain int    `json:"perDomain"`
	Level     string `json:"level"`
	// KeptNodes and KeptGPUs are the wholly free nodes kept now, and
	// their GPUs.
	KeptNodes int `json:"keptNodes"`
	KeptGPUs  int `json:"keptGPUs"`
	// DomainsShort counts the domains with fewer than PerDomain kept:
	// replacements use their spares (or they have fewer free nodes).
	DomainsShort int `json:"domainsShort"`
}

// NodeGPUsSource gives each node's GPUs as pkg/gang/placement/spares
// counts them (ListerGPUs).
type NodeGPUsSource interface {
	NodeGPUs() (func(node string) spares.NodeGPUs, error)
}

// keptSpares counts the policy's spares in tree: the kept GPUs per NVLink
// domain (to take off its free GPUs) and the view's summary. A policy
// that keeps none, or a level the tree lacks, counts nothing.
func keptSpares(tree *topology.Tree, p spares.Policy, gpus func(string) spares.NodeGPUs) (map[string]int, *Spares) {
	if tree == nil || p.PerDomain <= 0 || p.ForNewGangs || len(tree.Levels) == 0 {
		return nil, nil
	}
	l := tree.Level(p.Key())
	if l == nil {
		return nil, nil
	}
	nvl := tree.Levels[0]
	kept := map[string]int{}
	sum := &Spares{PerDomain: p.PerDomain, Level: l.Key}
	for _, d := range spares.Count(l, p.PerDomain, gpus) {
		for _, n := range d.Kept {
			if dom := nvl.DomainOf(n); dom != nil {
				kept[dom.ID] += gpus(n).GPUs
			}
		}
		sum.KeptNodes += len(d.Kept)
		sum.KeptGPUs += d.KeptGPUs
		if d.Missing > 0 {
			sum.DomainsShort++
		}
	}
	return kept, sum
}

// ListerGPUs counts nodes from listers: the GPUs of driver gpufabric.dev
// the slices publish, held when a claim's allocation names them (admin
// access excepted). Its cost is one pass over the nodes, the slices and
// the claims, paid at most once per view interval and only when the
// capacity changed (Run).
type ListerGPUs struct {
	Nodes  corelisters.NodeLister
	Slices resourcelisters.ResourceSliceLister
	Claims resourcelisters.ResourceClaimLister
}

var _ NodeGPUsSource = (*ListerGPUs)(nil)

// NodeGPUs counts every node's GPUs now.
func (l *ListerGPUs) NodeGPUs() (func(string) spares.NodeGPUs, error) {
	claims, err := l.Claims.List(labels.Everything())
	if err != nil {
		return nil, fmt.Errorf("list resource claims: %w", err)
	}
	held := map[structured.DeviceID]bool{}
	for _, rc := range claims {
		if rc.Status.Allocation == nil {
			continue
		}
		for _, r := range rc.Status.Allocation.Devices.Results {
			if r.Driver == topology.DriverName && (r.AdminAccess == nil || !*r.AdminAccess) {
				held[structured.MakeDeviceID(r.Driver, r.Pool, r.Device)] = true
			}
		}
	}
	slices, err := l.Slices.List(labels.Everything())
	if err != nil {
		return nil, fmt.Errorf("list resource slices: %w", err)
	}
	out := map[string]*spares.NodeGPUs{}
	for _, sl := range slices {
		if sl.Spec.Driver != topology.DriverName || sl.Spec.NodeName == nil || *sl.Spec.NodeName == "" {
			continue
		}
		n := out[*sl.Spec.NodeName]
		if n == nil {
			n = &spares.NodeGPUs{Usable: true}
			if node, err := l.Nodes.Get(*sl.Spec.NodeName); err == nil {
				n.Usable = spares.UsableNode(node)
			}
			out[*sl.Spec.NodeName] = n
		}
		addSliceDevices(n, sl, held)
	}
	return func(node string) spares.NodeGPUs {
		if n := out[node]; n != nil {
			return *n
		}
		return spares.NodeGPUs{}
	}, nil
}

func addSliceDevices(n *spares.NodeGPUs, sl *resourceapi.ResourceSlice, held map[structured.DeviceID]bool) {
	for i := range sl.Spec.Devices {
		d := &sl.Spec.Devices[i]
		n.AddDevice(d, held[structured.MakeDeviceID(sl.Spec.Driver, sl.Spec.Pool.Name, d.Name)])
	}
}
