// Package scenario builds the API objects of a described fabric: nodes, GPU
// slices with nvlinkDomain/ibRail attributes, fabric-domain pools,
// DeviceClasses, claims and pods, and whole scenarios of them (a fabric, its
// load, gangs to place). The simulator (pkg/sim) builds its clusters with
// it, and the placement tests and benchmarks their fixtures. It is pure: no
// client-go, no I/O.
package scenario

import (
	"fmt"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/deviceattribute"

	"github.com/gpufabric/gpufabric/pkg/topology"
)

// Namespace of every namespaced object the builders make.
const Namespace = "default"

// GPUSelector, NICSelector and FabricDomainSelector are the DeviceClasses'
// CEL selectors.
const (
	GPUSelector          = `device.driver == "gpufabric.dev" && device.attributes["gpufabric.dev"].type == "gpu"`
	NICSelector          = `device.driver == "gpufabric.dev" && device.attributes["gpufabric.dev"].type == "nic"`
	FabricDomainSelector = `device.driver == "gpufabric.dev" && device.attributes["gpufabric.dev"].type == "fabric-domain"`
)

func uid(kind, name string) types.UID { return types.UID(kind + "-" + name) }

// Node returns a ready node with the given allocatable cpu and memory, 110
// pods, and labels (kubernetes.io/hostname is added).
func Node(name, cpu, memory string, labels map[string]string) *v1.Node {
	l := map[string]string{"kubernetes.io/hostname": name}
	for k, v := range labels {
		l[k] = v
	}
	alloc := v1.ResourceList{
		v1.ResourceCPU:    resource.MustParse(cpu),
		v1.ResourceMemory: resource.MustParse(memory),
		v1.ResourcePods:   resource.MustParse("110"),
	}
	return &v1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: uid("node", name), Labels: l},
		Status:     v1.NodeStatus{Allocatable: alloc, Capacity: alloc},
	}
}

// GPU describes one GPU device of a node.
type GPU struct {
	NVLinkDomain string
	Kind         topology.DomainKind
	// Rail < 0 means no ibRail attribute.
	Rail int64
	// Taint, when set, is a NoSchedule device taint with this key.
	Taint string
	// NUMA, when set, is published as resource.kubernetes.io/numaNode.
	NUMA *int64
}

// NIC describes one NIC (HCA) of a node.
type NIC struct {
	// Rail < 0 means no ibRail attribute.
	Rail int64
	// Taint, when set, is a NoSchedule device taint with this key.
	Taint string
}

// NICName is the device name of NIC i of a node (ibDevice mlx5_<i>).
func NICName(i int) string { return topology.NICDeviceName(fmt.Sprintf("mlx5_%d", i)) }

// GPUSlice returns the node-local slice of a node (pool = node name) with
// devices gpu-0..gpu-N-1.
func GPUSlice(node string, gpus []GPU) *resourceapi.ResourceSlice {
	return NodeSlice(node, gpus, nil)
}

// NodeSlice is GPUSlice with NICs too: devices gpu-0..gpu-N-1, then
// NICName(0)..NICName(M-1), as the kubelet plugin publishes them (type
// nic, ibRail, ibDevice).
func NodeSlice(node string, gpus []GPU, nics []NIC) *resourceapi.ResourceSlice {
	devs := make([]resourceapi.Device, len(gpus), len(gpus)+len(nics))
	for i, g := range gpus {
		attrs := map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
			topology.AttrType:             {StringValue: ptrTo(topology.DeviceTypeGPU)},
			topology.AttrIndex:            {IntValue: ptrTo(int64(i))},
			topology.AttrNVLinkDomain:     {StringValue: ptrTo(g.NVLinkDomain)},
			topology.AttrNVLinkDomainKind: {StringValue: ptrTo(string(g.Kind))},
		}
		if g.Rail >= 0 {
			attrs[topology.AttrIBRail] = resourceapi.DeviceAttribute{IntValue: ptrTo(g.Rail)}
		}
		if g.NUMA != nil {
			attrs[deviceattribute.StandardDeviceAttributeNUMANode] = resourceapi.DeviceAttribute{IntValue: ptrTo(*g.NUMA)}
		}
		devs[i] = resourceapi.Device{
			Name:       topology.GPUDeviceName(i),
			Attributes: attrs,
			Capacity:   map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{topology.CapacityMemory: {Value: resource.MustParse("80Gi")}},
		}
		if g.Taint != "" {
			devs[i].Taints = []resourceapi.DeviceTaint{{Key: g.Taint, Value: "true", Effect: resourceapi.DeviceTaintEffectNoSchedule}}
		}
	}
	for i, n := range nics {
		attrs := map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
			topology.AttrType:     {StringValue: ptrTo(topology.DeviceTypeNIC)},
			topology.AttrIBDevice: {StringValue: ptrTo(fmt.Sprintf("mlx5_%d", i))},
		}
		if n.Rail >= 0 {
			attrs[topology.AttrIBRail] = resourceapi.DeviceAttribute{IntValue: ptrTo(n.Rail)}
		}
		dev := resourceapi.Device{Name: NICName(i), Attributes: attrs}
		if n.Taint != "" {
			dev.Taints = []resourceapi.DeviceTaint{{Key: n.Taint, Value: "true", Effect: resourceapi.DeviceTaintEffectNoSchedule}}
		}
		devs = append(devs, dev)
	}
	return &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: node + "-gpufabric.dev", UID: uid("slice", node)},
		Spec: resourceapi.ResourceSliceSpec{
			Driver:   topology.DriverName,
			Pool:     resourceapi.ResourcePool{Name: node, Generation: 1, ResourceSliceCount: 1},
			NodeName: ptrTo(node),
			Devices:  devs,
		},
	}
}

// FabricDomainSlice returns the cluster-level pool of one NVLink domain: a
// NodeSelector on kubernetes.io/hostname matching exactly the nodes, and channels channel-0..N-1.
func FabricDomainSlice(domainID string, nodes []string, channels int) *resourceapi.ResourceSlice {
	devs := make([]resourceapi.Device, channels)
	for i := range devs {
		devs[i] = resourceapi.Device{
			Name: topology.ChannelDeviceName(i),
			Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
				topology.AttrType:         {StringValue: ptrTo(topology.DeviceTypeFabricDomain)},
				topology.AttrNVLinkDomain: {StringValue: ptrTo(domainID)},
				topology.AttrNodeCount:    {IntValue: ptrTo(int64(len(nodes)))},
			},
		}
	}
	pool := topology.FabricDomainPoolName(domainID)
	return &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: pool, UID: uid("slice", pool)},
		Spec: resourceapi.ResourceSliceSpec{
			Driver: topology.DriverName,
			Pool:   resourceapi.ResourcePool{Name: pool, Generation: 1, ResourceSliceCount: 1},
			NodeSelector: &v1.NodeSelector{NodeSelectorTerms: []v1.NodeSelectorTerm{{
				MatchExpressions: []v1.NodeSelectorRequirement{{Key: "kubernetes.io/hostname", Operator: v1.NodeSelectorOpIn, Values: nodes}},
			}}},
			Devices: devs,
		},
	}
}

// DeviceClasses returns the GPU, NIC and fabric-domain classes.
func DeviceClasses() []*resourceapi.DeviceClass {
	class := func(name, expr string) *resourceapi.DeviceClass {
		return &resourceapi.DeviceClass{
			ObjectMeta: metav1.ObjectMeta{Name: name, UID: uid("class", name)},
			Spec:       resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: expr}}}},
		}
	}
	return []*resourceapi.DeviceClass{
		class(topology.GPUDeviceClass, GPUSelector),
		class(topology.NICDeviceClass, NICSelector),
		class(topology.FabricDomainDeviceClass, FabricDomainSelector),
	}
}

// Claim returns an unallocated claim for exactly count devices of a class.
func Claim(name, class string, count int64) *resourceapi.ResourceClaim {
	return &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: Namespace, Name: name, UID: uid("claim", name)},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
			Name: "req",
			Exactly: &resourceapi.ExactDeviceRequest{
				DeviceClassName: class,
				AllocationMode:  resourceapi.DeviceAllocationModeExactCount,
				Count:           count,
			},
		}}}},
	}
}

// FirstAvailableClaim asks for GPUs with prioritized alternatives: counts[0]
// GPUs (subrequest alt0), else counts[1] (alt1), and so on.
func FirstAvailableClaim(name string, counts ...int64) *resourceapi.ResourceClaim {
	c := GPUClaim(name, 1)
	r := &c.Spec.Devices.Requests[0]
	r.Exactly = nil
	for i, n := range counts {
		r.FirstAvailable = append(r.FirstAvailable, resourceapi.DeviceSubRequest{
			Name: fmt.Sprintf("alt%d", i), DeviceClassName: topology.GPUDeviceClass,
			AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: n,
		})
	}
	return c
}

// SameNUMAGPUClaim is GPUClaim with a matchAttribute constraint on the
// standard numaNode attribute: all count GPUs on one NUMA node.
func SameNUMAGPUClaim(name string, count int64) *resourceapi.ResourceClaim {
	c := GPUClaim(name, count)
	c.Spec.Devices.Constraints = []resourceapi.DeviceConstraint{{MatchAttribute: ptrTo(resourceapi.FullyQualifiedName(deviceattribute.StandardDeviceAttributeNUMANode))}}
	return c
}

// NICClaim is Claim for count NICs.
func NICClaim(name string, count int64) *resourceapi.ResourceClaim {
	return Claim(name, topology.NICDeviceClass, count)
}

// GPUNICClaim is one claim for gpus GPUs (request "req") and nics NICs
// (request "nics").
func GPUNICClaim(name string, gpus, nics int64) *resourceapi.ResourceClaim {
	c := GPUClaim(name, gpus)
	c.Spec.Devices.Requests = append(c.Spec.Devices.Requests, NICRequest("nics", nics))
	return c
}

// NICRequest is a request for count NICs.
func NICRequest(name string, count int64) resourceapi.DeviceRequest {
	return resourceapi.DeviceRequest{Name: name, Exactly: &resourceapi.ExactDeviceRequest{
		DeviceClassName: topology.NICDeviceClass, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: count,
	}}
}

// GPUClaim is Claim for count GPUs.
func GPUClaim(name string, count int64) *resourceapi.ResourceClaim {
	return Claim(name, topology.GPUDeviceClass, count)
}

// AllocatedClaim returns a claim already allocated to devices of one pool
// (existing load).
func AllocatedClaim(name, pool string, devices ...string) *resourceapi.ResourceClaim {
	c := GPUClaim(name, int64(len(devices)))
	a := &resourceapi.AllocationResult{}
	for _, d := range devices {
		a.Devices.Results = append(a.Devices.Results, resourceapi.DeviceRequestAllocationResult{Request: "req", Driver: topology.DriverName, Pool: pool, Device: d})
	}
	c.Status.Allocation = a
	return c
}

// Pod returns a pending pod requesting cpu and memory that uses the named
// claims (by ResourceClaimName).
func Pod(name, cpu, memory string, claims ...string) *v1.Pod {
	p := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: Namespace, Name: name, UID: uid("pod", name)},
		Spec: v1.PodSpec{
			SchedulerName: topology.SchedulerName,
			Containers: []v1.Container{{Name: "main", Resources: v1.ResourceRequirements{Requests: v1.ResourceList{
				v1.ResourceCPU:    resource.MustParse(cpu),
				v1.ResourceMemory: resource.MustParse(memory),
			}}}},
		},
	}
	for _, c := range claims {
		p.Spec.ResourceClaims = append(p.Spec.ResourceClaims, v1.PodResourceClaim{Name: c, ResourceClaimName: ptrTo(c)})
	}
	return p
}

// BoundPod is Pod already running on a node.
func BoundPod(name, node, cpu, memory string) *v1.Pod {
	p := Pod(name, cpu, memory)
	p.Spec.NodeName = node
	p.Status.Phase = v1.PodRunning
	return p
}

// NodeName is the name of node i of a domain.
func NodeName(prefix string, i int) string { return fmt.Sprintf("%s-n%02d", prefix, i) }

func ptrTo[T any](v T) *T { return &v }
