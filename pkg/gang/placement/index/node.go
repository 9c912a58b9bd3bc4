package index

import (
	"encoding/json"
	"fmt"
	"sort"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	resourcehelper "k8s.io/component-helpers/resource"
	"k8s.io/dynamic-resource-allocation/structured"

	"github.com/gpufabric/gpufabric/pkg/topology"
)

// ResList is a resource list in integers: millicores for cpu, the value
// for everything else.
type ResList map[v1.ResourceName]int64

func toResList(l v1.ResourceList) ResList {
	out := make(ResList, len(l))
	for name, q := range l {
		if name == v1.ResourceCPU {
			out[name] = q.MilliValue()
		} else {
			out[name] = q.Value()
		}
	}
	return out
}

// PodRequests is what a pod requests of its node (init containers,
// overhead and all, as the kube-scheduler counts it).
func PodRequests(p *v1.Pod) ResList {
	return toResList(resourcehelper.PodRequests(p, resourcehelper.PodResourcesOptions{}))
}

// Add adds o times times to r.
func (r ResList) Add(o ResList, times int64) {
	for name, v := range o {
		r[name] += v * times
	}
}

// NodeState is one node with what the snapshot knows about its load. Its
// accessors return the snapshot's own data: callers must not modify it.
type NodeState struct {
	node        *v1.Node
	idx         int                          // position in Snapshot.nodes
	slices      []*resourceapi.ResourceSlice // node-local slices, by name
	allocated   sets.Set[structured.DeviceID]
	allocatable ResList
	requested   ResList
	pods        int64
	boundPods   []*v1.Pod      // for pod anti-affinity
	devs        *nodeDevices   // built on first use
	free        map[string]int // class → free matching devices; reset by dirty
	// trimmed: class → the node's slices with only that class's devices.
	trimmed map[string][]*resourceapi.ResourceSlice
}

func newNodeState(n *v1.Node) *NodeState {
	return &NodeState{
		node:        n,
		allocated:   sets.New[structured.DeviceID](),
		allocatable: toResList(n.Status.Allocatable),
		requested:   ResList{},
		free:        map[string]int{},
	}
}

// Node returns the Node object.
func (ns *NodeState) Node() *v1.Node { return ns.node }

// Name returns the node's name.
func (ns *NodeState) Name() string { return ns.node.Name }

// Index returns the node's position in Snapshot.Nodes, which callers may
// use to index per-node tables.
func (ns *NodeState) Index() int { return ns.idx }

// Allocatable returns the node's allocatable resources.
func (ns *NodeState) Allocatable() ResList { return ns.allocatable }

// Requested returns what the pods bound to the node request.
func (ns *NodeState) Requested() ResList { return ns.requested }

// Pods returns how many pods are bound to the node.
func (ns *NodeState) Pods() int64 { return ns.pods }

// BoundPods returns the pods bound to the node.
func (ns *NodeState) BoundPods() []*v1.Pod { return ns.boundPods }

// Allocated reports whether an allocated claim holds the node-local
// device.
func (ns *NodeState) Allocated(id structured.DeviceID) bool { return ns.allocated.Has(id) }

// DeviceIDs returns the node-local devices (newest generation of each
// pool), sorted. Callers must not modify the slice.
func (ns *NodeState) DeviceIDs() []structured.DeviceID { return ns.devices().ids }

// Device returns the node-local device (of its pool's newest generation),
// or nil.
func (ns *NodeState) Device(id structured.DeviceID) *resourceapi.Device {
	return ns.devices().byID[id]
}

func (ns *NodeState) addPod(req ResList) {
	ns.requested.Add(req, 1)
	ns.pods++
}

func (ns *NodeState) dirty() { clear(ns.free) }

// nodeDevices indexes the devices of a node's local pools (newest
// generation of each pool).
type nodeDevices struct {
	byID  map[structured.DeviceID]*resourceapi.Device
	ids   []structured.DeviceID // sorted by pool, then device
	drv   map[structured.DeviceID]string
	match map[string][]structured.DeviceID // class → matching devices
	sig   map[structured.DeviceID]string   // content signatures (FreeDeviceKey)
	shape string                           // the devices' shapes (ShapeKey); "" until used
	sick  int                              // FabricSick's answer; -1 until used
}

func (ns *NodeState) devices() *nodeDevices {
	if ns.devs != nil {
		return ns.devs
	}
	newest := map[poolID]int64{}
	for _, sl := range ns.slices {
		pid := poolID{sl.Spec.Driver, sl.Spec.Pool.Name}
		if g, ok := newest[pid]; !ok || sl.Spec.Pool.Generation > g {
			newest[pid] = sl.Spec.Pool.Generation
		}
	}
	d := &nodeDevices{byID: map[structured.DeviceID]*resourceapi.Device{}, drv: map[structured.DeviceID]string{}, match: map[string][]structured.DeviceID{}, sick: -1}
	for _, sl := range ns.slices {
		if newest[poolID{sl.Spec.Driver, sl.Spec.Pool.Name}] != sl.Spec.Pool.Generation {
			continue
		}
		for i := range sl.Spec.Devices {
			dev := &sl.Spec.Devices[i]
			id := structured.MakeDeviceID(sl.Spec.Driver, sl.Spec.Pool.Name, dev.Name)
			d.byID[id] = dev
			d.drv[id] = sl.Spec.Driver
			d.ids = append(d.ids, id)
		}
	}
	sort.Slice(d.ids, func(i, j int) bool { return d.ids[i].String() < d.ids[j].String() })
	ns.devs = d
	return d
}

// FabricSick returns how many of the node's devices say their links are
// in trouble (topology.FabricSick), computed once per device index.
func (ns *NodeState) FabricSick() int {
	d := ns.devices()
	if d.sick < 0 {
		d.sick = 0
		for _, dev := range d.byID {
			if topology.FabricSick(dev) {
				d.sick++
			}
		}
	}
	return d.sick
}

// signature is a device's content without its name ("" when it shares
// counters or allows several allocations), cached on the node's index.
func (d *nodeDevices) signature(id structured.DeviceID) (string, error) {
	if sig, ok := d.sig[id]; ok {
		return sig, nil
	}
	dev := *d.byID[id]
	sig := ""
	if len(dev.ConsumesCounters) == 0 && (dev.AllowMultipleAllocations == nil || !*dev.AllowMultipleAllocations) {
		dev.Name = ""
		raw, err := json.Marshal(struct {
			Driver string
			Device resourceapi.Device
		}{d.drv[id], dev})
		if err != nil {
			return "", fmt.Errorf("device %s: signature: %w", id, err)
		}
		sig = string(raw)
	}
	if d.sig == nil {
		d.sig = map[structured.DeviceID]string{}
	}
	d.sig[id] = sig
	return sig, nil
}
