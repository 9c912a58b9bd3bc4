package scheduler

import (
	corelisters "k8s.io/client-go/listers/core/v1"
	resourcelisters "k8s.io/client-go/listers/resource/v1"

	"github.com/gpufabric/gpufabric/pkg/gang/freeroom"
)

// freeRoomConfig is the free-room publisher of a term (the leader's): the
// free GPUs of the metrics, and the fabric tree from the informers, built
// again only after a node was added, deleted or relabelled or a slice
// changed; written to RecordNamespace past the fence, owned by the
// fabric-domain DeviceClass; the spares the placement keeps are not
// counted free.
func freeRoomConfig(s *Scheduler) freeroom.Config {
	inf := s.inf
	return freeroom.Config{Client: s.cfg.Client, Namespace: s.cfg.RecordNamespace, Interval: s.cfg.FreeRoomInterval,
		FreeGPUs: s.snaps.freeGPUs, Changes: inf.capacityEvents.Load, Fence: s.gate.Fenced,
		Owner: freeroom.ClassOwner(resourcelisters.NewDeviceClassLister(inf.classes.GetIndexer())), Tree: listerTree(s),
		Spares: s.cfg.Placement.Spares, NodeGPUs: &freeroom.ListerGPUs{Nodes: corelisters.NewNodeLister(inf.nodes.GetIndexer()),
			Slices: resourcelisters.NewResourceSliceLister(inf.slices.GetIndexer()), Claims: resourcelisters.NewResourceClaimLister(inf.claims.GetIndexer())}}
}

// listerTree is the fabric tree from the informers, built again only after
// a node was added, deleted or relabelled or a slice changed.
func listerTree(s *Scheduler) *freeroom.ListerTree {
	return &freeroom.ListerTree{Config: s.cfg.Tree, Changes: s.inf.topologyEvents.Load,
		Nodes: corelisters.NewNodeLister(s.inf.nodes.GetIndexer()), Slices: resourcelisters.NewResourceSliceLister(s.inf.slices.GetIndexer())}
}
