package freeroom

import (
	"fmt"
	"sync"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	corelisters "k8s.io/client-go/listers/core/v1"
	resourcelisters "k8s.io/client-go/listers/resource/v1"

	"github.com/gpufabric/gpufabric/pkg/topology"
)

// ListerTree builds the fabric tree from listers, again only when Changes
// moved since the last build (BuildTree reads every node and slice:
// BenchmarkTree). Safe for concurrent use.
type ListerTree struct {
	Config topology.TreeConfig
	Nodes  corelisters.NodeLister
	Slices resourcelisters.ResourceSliceLister
	// Changes counts the events that can change the tree: slices, and
	// nodes added, deleted or relabelled.
	Changes func() uint64

	mu   sync.Mutex
	tree *topology.Tree
	at   uint64
}

var _ TreeSource = (*ListerTree)(nil)

// Tree returns the tree of the listed nodes and slices.
func (l *ListerTree) Tree() (*topology.Tree, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := l.Changes()
	if l.tree != nil && n == l.at {
		return l.tree, nil
	}
	nodes, err := l.Nodes.List(labels.Everything())
	if err != nil {
		return nil, fmt.Errorf("list nodes: %w", err)
	}
	slices, err := l.Slices.List(labels.Everything())
	if err != nil {
		return nil, fmt.Errorf("list resource slices: %w", err)
	}
	tree, err := topology.BuildTree(l.Config, nodes, slices)
	if err != nil {
		return nil, err
	}
	l.tree, l.at = tree, n
	return tree, nil
}

// ClassOwner returns Config.Owner: the DeviceClass fabric-domain.gpufabric.dev
// the chart installs, which owns the fabric-domain pools and the Lease too,
// so that `helm uninstall` (which deletes the class) leaves no view behind;
// nil while the lister has no such class.
func ClassOwner(classes resourcelisters.DeviceClassLister) func() *metav1.OwnerReference {
	return func() *metav1.OwnerReference {
		c, err := classes.Get(topology.FabricDomainDeviceClass)
		if err != nil {
			return nil
		}
		return &metav1.OwnerReference{APIVersion: resourceapi.SchemeGroupVersion.String(), Kind: "DeviceClass", Name: c.Name, UID: c.UID}
	}
}
