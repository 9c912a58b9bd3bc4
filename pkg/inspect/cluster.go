package inspect

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	resourceapi "k8s.io/api/resource/v1"
	schedulingv1alpha3 "k8s.io/api/scheduling/v1alpha3"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpufabric/gpufabric/pkg/gang/placement/spares"
	"github.com/gpufabric/gpufabric/pkg/topology"
)

// Cluster is what the reports are built from: API objects as listed. Any
// field may be empty; a report uses only what it needs.
type Cluster struct {
	Nodes     []corev1.Node
	Slices    []resourceapi.ResourceSlice
	Claims    []resourceapi.ResourceClaim
	Pods      []corev1.Pod
	PodGroups []schedulingv1beta1.PodGroup
	// Composites are the CompositePodGroups (scheduling.k8s.io/v1alpha3),
	// when served.
	Composites []schedulingv1alpha3.CompositePodGroup
	Events     []eventsv1.Event
	// Warnings from loading (e.g. a list that was forbidden).
	Warnings []string
}

// Options shared by the reports.
type Options struct {
	// Levels are node label keys above the NVLink domain, innermost first,
	// as the scheduler's --topology-levels.
	Levels []string
	// Spares is the scheduler's spare-node policy, for status.
	Spares spares.Policy
}

// Labels read from pods.
const (
	LabelJobName = "batch.kubernetes.io/job-name"
)

// device is one device of driver gpufabric.dev.
type device struct {
	Pool, Name string
	// Node of a node-local pool; "" for cluster-level pools.
	Node         string
	Type         string
	Product      string
	NVLinkDomain string
	Rail         int64
	HasRail      bool
	PortState    string
	RateGbps     int64
	Taints       []resourceapi.DeviceTaint
}

func (d *device) key() string { return d.Pool + "/" + d.Name }

// blocked reports whether a NoSchedule or NoExecute taint keeps new claims
// off the device.
func (d *device) blocked() bool {
	for _, t := range d.Taints {
		if t.Effect == resourceapi.DeviceTaintEffectNoSchedule || t.Effect == resourceapi.DeviceTaintEffectNoExecute {
			return true
		}
	}
	return false
}

// index is a Cluster prepared for lookups.
type index struct {
	tree *topology.Tree
	// devices sorted by pool, then name.
	devices []*device
	byKey   map[string]*device
	byNode  map[string][]*device
	// channels of each NVLink domain's fabric-domain pool.
	channels map[string][]*device
	// holder of each allocated device, by pool/device.
	holder    map[string]GangRef
	pods      map[types.UID]*corev1.Pod
	jobs      map[string]string // ns/podgroup → job
	nodes     map[string]*corev1.Node
	nodeNames []string
}

func newIndex(c *Cluster, opts Options) (*index, error) {
	nodes := make([]*corev1.Node, len(c.Nodes))
	ix := &index{nodes: map[string]*corev1.Node{}, pods: map[types.UID]*corev1.Pod{}, jobs: map[string]string{}}
	for i := range c.Nodes {
		nodes[i] = &c.Nodes[i]
		ix.nodes[c.Nodes[i].Name] = &c.Nodes[i]
		ix.nodeNames = append(ix.nodeNames, c.Nodes[i].Name)
	}
	sort.Strings(ix.nodeNames)
	slices := make([]*resourceapi.ResourceSlice, len(c.Slices))
	for i := range c.Slices {
		slices[i] = &c.Slices[i]
	}
	tree, err := topology.BuildTree(topology.TreeConfig{LabelLevels: opts.Levels}, nodes, slices)
	if err != nil {
		return nil, fmt.Errorf("build fabric tree: %w", err)
	}
	ix.tree = tree
	ix.readDevices(c.Slices)
	for i := range c.Pods {
		p := &c.Pods[i]
		ix.pods[p.UID] = p
		if g := podGroupOf(p); g != "" && p.Labels[LabelJobName] != "" {
			ix.jobs[p.Namespace+"/"+g] = p.Labels[LabelJobName]
		}
	}
	for i := range c.PodGroups {
		pg := &c.PodGroups[i]
		if job := ownerJob(pg.OwnerReferences); job != "" {
			ix.jobs[pg.Namespace+"/"+pg.Name] = job
		}
	}
	ix.holder = map[string]GangRef{}
	for i := range c.Claims {
		ix.readAllocation(&c.Claims[i])
	}
	return ix, nil
}

// readDevices indexes the devices of driver gpufabric.dev at their pool's
// newest generation.
func (ix *index) readDevices(all []resourceapi.ResourceSlice) {
	newest := map[string]int64{}
	for i := range all {
		s := &all[i]
		if g, ok := newest[s.Spec.Pool.Name]; s.Spec.Driver == topology.DriverName && (!ok || s.Spec.Pool.Generation > g) {
			newest[s.Spec.Pool.Name] = s.Spec.Pool.Generation
		}
	}
	ix.byKey, ix.byNode, ix.channels = map[string]*device{}, map[string][]*device{}, map[string][]*device{}
	for i := range all {
		s := &all[i]
		if s.Spec.Driver != topology.DriverName || s.Spec.Pool.Generation != newest[s.Spec.Pool.Name] {
			continue
		}
		for j := range s.Spec.Devices {
			d := newDevice(s, &s.Spec.Devices[j])
			ix.devices = append(ix.devices, d)
		}
	}
	sort.Slice(ix.devices, func(i, j int) bool { return ix.devices[i].key() < ix.devices[j].key() })
	for _, d := range ix.devices {
		ix.byKey[d.key()] = d
		switch {
		case d.Node != "":
			ix.byNode[d.Node] = append(ix.byNode[d.Node], d)
		case d.Type == topology.DeviceTypeFabricDomain && d.NVLinkDomain != "":
			ix.channels[d.NVLinkDomain] = append(ix.channels[d.NVLinkDomain], d)
		}
	}
}

func newDevice(s *resourceapi.ResourceSlice, in *resourceapi.Device) *device {
	d := &device{Pool: s.Spec.Pool.Name, Name: in.Name, Taints: in.Taints}
	if s.Spec.NodeName != nil {
		d.Node = *s.Spec.NodeName
	}
	str := func(name resourceapi.QualifiedName) string {
		if v := in.Attributes[name]; v.StringValue != nil {
			return *v.StringValue
		}
		return ""
	}
	d.Type, d.Product, d.NVLinkDomain, d.PortState = str(topology.AttrType), str(topology.AttrProductName),
		str(topology.AttrNVLinkDomain), str(topology.AttrPortState)
	d.Rail, d.HasRail = topology.DeviceIBRail(in)
	if v := in.Attributes[topology.AttrRateGbps]; v.IntValue != nil {
		d.RateGbps = *v.IntValue
	}
	return d
}

// readAllocation records which gang holds each device of driver
// gpufabric.dev that the claim has allocated.
func (ix *index) readAllocation(c *resourceapi.ResourceClaim) {
	if c.Status.Allocation == nil {
		return
	}
	holder := ix.claimHolder(c)
	for _, r := range c.Status.Allocation.Devices.Results {
		if r.Driver == topology.DriverName {
			ix.holder[r.Pool+"/"+r.Device] = holder
		}
	}
}

// claimHolder names the gang a claim belongs to, from its first consumer
// (sorted) that resolves: a PodGroup, a member pod's PodGroup, a pod.
func (ix *index) claimHolder(c *resourceapi.ResourceClaim) GangRef {
	refs := append([]resourceapi.ResourceClaimConsumerReference(nil), c.Status.ReservedFor...)
	sort.Slice(refs, func(i, j int) bool {
		if refs[i].Resource != refs[j].Resource {
			return refs[i].Resource < refs[j].Resource
		}
		return refs[i].Name < refs[j].Name
	})
	for _, r := range refs {
		switch r.Resource {
		case "podgroups":
			return ix.groupRef(c.Namespace, r.Name)
		case "pods":
			p := ix.pods[r.UID]
			if p == nil {
				return GangRef{Kind: KindPod, Namespace: c.Namespace, Name: r.Name}
			}
			if g := podGroupOf(p); g != "" {
				return ix.groupRef(p.Namespace, g)
			}
			return GangRef{Kind: KindPod, Namespace: p.Namespace, Name: p.Name, Job: p.Labels[LabelJobName]}
		}
	}
	return GangRef{Kind: KindClaim, Namespace: c.Namespace, Name: c.Name}
}

func (ix *index) groupRef(ns, name string) GangRef {
	return GangRef{Kind: KindPodGroup, Namespace: ns, Name: name, Job: ix.jobs[ns+"/"+name]}
}

// podGroupOf returns the PodGroup a pod names, "" for none.
func podGroupOf(p *corev1.Pod) string {
	if sg := p.Spec.SchedulingGroup; sg != nil && sg.PodGroupName != nil {
		return *sg.PodGroupName
	}
	return ""
}

func ownerJob(refs []metav1.OwnerReference) string {
	for _, r := range refs {
		if r.Kind == "Job" && strings.HasPrefix(r.APIVersion, "batch/") {
			return r.Name
		}
	}
	return ""
}

// gpus returns the GPUs of a node.
func (ix *index) gpus(node string) []*device {
	var out []*device
	for _, d := range ix.byNode[node] {
		if d.Type == topology.DeviceTypeGPU {
			out = append(out, d)
		}
	}
	return out
}

// count adds a device to counts: used, tainted or free.
func (ix *index) count(c *GPUCounts, d *device) {
	c.Total++
	_, used := ix.holder[d.key()]
	switch {
	case used:
		c.Used++
	case d.blocked():
		c.Tainted++
	default:
		c.Free++
	}
}

// levelKeys are the keys of a member's Placement: the NVLink domain and
// the label levels.
func (ix *index) levelKeys() []string {
	var out []string
	for _, l := range ix.tree.Levels[:len(ix.tree.Levels)-1] {
		out = append(out, l.Key)
	}
	return out
}

func (ix *index) nodeInfo(name string) NodeInfo {
	n := NodeInfo{Name: name}
	if d := ix.tree.Levels[0].DomainOf(name); d != nil {
		n.NVLinkDomain = d.ID
	}
	for _, l := range ix.tree.Levels[1 : len(ix.tree.Levels)-1] {
		v := ""
		if d := l.DomainOf(name); d != nil {
			v = d.ID
		}
		n.Levels = append(n.Levels, v)
	}
	gpuRails, taints := map[int64]bool{}, map[string]*DeviceTaint{}
	for _, d := range ix.byNode[name] {
		switch d.Type {
		case topology.DeviceTypeGPU:
			ix.count(&n.GPUs, d)
			if d.Product != "" && !slices.Contains(n.Models, d.Product) {
				n.Models = append(n.Models, d.Product)
			}
			if d.HasRail {
				gpuRails[d.Rail] = true
			}
		case topology.DeviceTypeNIC:
			nic := NICInfo{Name: d.Name, PortState: d.PortState, RateGbps: d.RateGbps}
			if d.HasRail {
				nic.Rail = &d.Rail
			}
			n.NICs = append(n.NICs, nic)
		}
		for _, t := range d.Taints {
			k := fmt.Sprintf("%s=%s:%s", t.Key, t.Value, t.Effect)
			if taints[k] == nil {
				taints[k] = &DeviceTaint{Key: t.Key, Value: t.Value, Effect: string(t.Effect)}
			}
			taints[k].Devices = append(taints[k].Devices, d.Name)
		}
	}
	sort.Strings(n.Models)
	n.GPURails = sortedKeys(gpuRails)
	for _, k := range sortedKeys(taints) {
		n.DeviceTaints = append(n.DeviceTaints, *taints[k])
	}
	if node := ix.nodes[name]; node != nil {
		n.Unschedulable = node.Spec.Unschedulable
		for _, t := range node.Spec.Taints {
			n.NodeTaints = append(n.NodeTaints, taintString(t.Key, t.Value, string(t.Effect)))
		}
	}
	return n
}
