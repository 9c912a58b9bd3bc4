package inspect

import (
	"fmt"
	"github.com/gpufabric/gpufabric/pkg/gang/vocab"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	resourceapi "k8s.io/api/resource/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/gpufabric/gpufabric/pkg/topology"
)

// Builders of the objects the tests feed the reports. Each adds a complete
// object to a Cluster; tests change what they care about afterwards.

const (
	rackKey = "topology.gpufabric.dev/rack"
	leafKey = "topology.gpufabric.dev/ib-leaf"
)

var testNow = time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)

type builder struct{ c *Cluster }

func newBuilder() *builder { return &builder{c: &Cluster{}} }

// node adds a Node with labels and a node-local pool of gpus GPUs (rails
// 0..gpus-1, product GB200) and as many NICs in NVLink domain domain.
func (b *builder) node(name, domain string, gpus int, labels map[string]string) *builder {
	b.c.Nodes = append(b.c.Nodes, corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}})
	var devices []resourceapi.Device
	for i := range gpus {
		devices = append(devices, resourceapi.Device{Name: topology.GPUDeviceName(i), Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
			topology.AttrType:         {StringValue: ptr.To(topology.DeviceTypeGPU)},
			topology.AttrProductName:  {StringValue: ptr.To("NVIDIA GB200")},
			topology.AttrNVLinkDomain: {StringValue: ptr.To(domain)},
			topology.AttrIBRail:       {IntValue: ptr.To(int64(i))},
		}})
	}
	for i := range gpus {
		devices = append(devices, resourceapi.Device{Name: fmt.Sprintf("nic-mlx5-%d", i), Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
			topology.AttrType:      {StringValue: ptr.To(topology.DeviceTypeNIC)},
			topology.AttrIBRail:    {IntValue: ptr.To(int64(i))},
			topology.AttrPortState: {StringValue: ptr.To("ACTIVE")},
			topology.AttrRateGbps:  {IntValue: ptr.To(int64(400))},
		}})
	}
	b.c.Slices = append(b.c.Slices, resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: name + "-slice"},
		Spec: resourceapi.ResourceSliceSpec{Driver: topology.DriverName, NodeName: ptr.To(name),
			Pool: resourceapi.ResourcePool{Name: name, ResourceSliceCount: 1}, Devices: devices},
	})
	return b
}

// channels adds the fabric-domain pool of a domain with n channels.
func (b *builder) channels(domain string, n int) *builder {
	var devices []resourceapi.Device
	for i := range n {
		devices = append(devices, resourceapi.Device{Name: topology.ChannelDeviceName(i), Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
			topology.AttrType:         {StringValue: ptr.To(topology.DeviceTypeFabricDomain)},
			topology.AttrNVLinkDomain: {StringValue: ptr.To(domain)},
		}})
	}
	b.c.Slices = append(b.c.Slices, resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: "fabric-" + domain},
		Spec: resourceapi.ResourceSliceSpec{Driver: topology.DriverName, NodeSelector: &corev1.NodeSelector{},
			Pool: resourceapi.ResourcePool{Name: topology.FabricDomainPoolName(domain), ResourceSliceCount: 1}, Devices: devices},
	})
	return b
}

// taint puts a taint on a device of a pool.
func (b *builder) taint(pool, device, key, value string, effect resourceapi.DeviceTaintEffect) *builder {
	for i := range b.c.Slices {
		s := &b.c.Slices[i]
		for j := range s.Spec.Devices {
			if s.Spec.Pool.Name == pool && s.Spec.Devices[j].Name == device {
				s.Spec.Devices[j].Taints = append(s.Spec.Devices[j].Taints, resourceapi.DeviceTaint{Key: key, Value: value, Effect: effect})
			}
		}
	}
	return b
}

// claim adds a claim allocated with devices ("pool/device") and reserved
// for consumers ("pods/<name>" or "podgroups/<name>", same namespace).
func (b *builder) claim(ns, name string, consumers []string, devices ...string) *builder {
	c := resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: uid(ns, name)}}
	if len(devices) > 0 {
		c.Status.Allocation = &resourceapi.AllocationResult{}
		for _, d := range devices {
			pool, dev, _ := strings.Cut(d, "/")
			c.Status.Allocation.Devices.Results = append(c.Status.Allocation.Devices.Results,
				resourceapi.DeviceRequestAllocationResult{Request: "req", Driver: topology.DriverName, Pool: pool, Device: dev})
		}
	}
	for _, ref := range consumers {
		res, n, _ := strings.Cut(ref, "/")
		c.Status.ReservedFor = append(c.Status.ReservedFor, resourceapi.ResourceClaimConsumerReference{Resource: res, Name: n, UID: uid(ns, n)})
	}
	b.c.Claims = append(b.c.Claims, c)
	return b
}

// pod adds a pod naming group (none: "") bound to node (none: "") using
// claims by name.
func (b *builder) pod(ns, name, group, node string, labels map[string]string, claims ...string) *builder {
	p := corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: uid(ns, name), Labels: labels},
		Spec:       corev1.PodSpec{SchedulerName: topology.SchedulerName, NodeName: node},
		Status:     corev1.PodStatus{Phase: corev1.PodPending},
	}
	if group != "" {
		p.Spec.SchedulingGroup = &corev1.PodSchedulingGroup{PodGroupName: ptr.To(group)}
	}
	for _, c := range claims {
		p.Spec.ResourceClaims = append(p.Spec.ResourceClaims, corev1.PodResourceClaim{Name: c, ResourceClaimName: ptr.To(c)})
	}
	b.c.Pods = append(b.c.Pods, p)
	return b
}

// podScheduled sets the PodScheduled condition of the last pod named name.
func (b *builder) podScheduled(ns, name, reason, message string) *builder {
	for i := range b.c.Pods {
		if p := &b.c.Pods[i]; p.Namespace == ns && p.Name == name {
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: reason, Message: message}}
		}
	}
	return b
}

// gate adds a scheduling gate to a pod.
func (b *builder) gate(ns, name, gate string) *builder {
	for i := range b.c.Pods {
		if p := &b.c.Pods[i]; p.Namespace == ns && p.Name == name {
			p.Spec.SchedulingGates = append(p.Spec.SchedulingGates, corev1.PodSchedulingGate{Name: gate})
		}
	}
	return b
}

// group adds a PodGroup of minCount in one NVLink domain with a shared
// claim named <name>-fabric, and conditions.
func (b *builder) group(ns, name string, min int32, conds ...metav1.Condition) *builder {
	pg := schedulingv1beta1.PodGroup{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: uid(ns, name)},
		Spec: schedulingv1beta1.PodGroupSpec{
			SchedulingPolicy:      schedulingv1beta1.PodGroupSchedulingPolicy{Gang: &schedulingv1beta1.GangSchedulingPolicy{MinCount: min}},
			SchedulingConstraints: &schedulingv1beta1.PodGroupSchedulingConstraints{Topology: []schedulingv1beta1.TopologyConstraint{{Key: topology.TopologyKeyNVLinkDomain}}},
			ResourceClaims:        []schedulingv1beta1.PodGroupResourceClaim{{Name: "fabric", ResourceClaimName: ptr.To(name + "-fabric")}},
		},
		Status: schedulingv1beta1.PodGroupStatus{Conditions: conds},
	}
	b.c.PodGroups = append(b.c.PodGroups, pg)
	return b
}

// created sets the creation time of the PodGroup ns/name to ago before
// testNow, and its spec.priority when prio is not nil.
func (b *builder) created(ns, name string, ago time.Duration, prio *int32) *builder {
	for i := range b.c.PodGroups {
		if pg := &b.c.PodGroups[i]; pg.Namespace == ns && pg.Name == name {
			pg.CreationTimestamp = metav1.Time{Time: testNow.Add(-ago)}
			pg.Spec.Priority = prio
		}
	}
	return b
}

func cond(typ string, status metav1.ConditionStatus, reason, message string) metav1.Condition {
	return metav1.Condition{Type: typ, Status: status, Reason: reason, Message: message}
}

// event adds an events.k8s.io event about a PodGroup, last seen ago
// before testNow, count times.
func (b *builder) event(ns, group, typ, reason, note string, count int32, ago time.Duration) *builder {
	e := eventsv1.Event{
		ObjectMeta:          metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("%s.%d", group, len(b.c.Events))},
		EventTime:           metav1.MicroTime{Time: testNow.Add(-ago)},
		Regarding:           corev1.ObjectReference{Kind: "PodGroup", Namespace: ns, Name: group},
		Type:                typ,
		Reason:              reason,
		Note:                note,
		ReportingController: topology.SchedulerName,
	}
	if count > 1 {
		e.Series = &eventsv1.EventSeries{Count: count, LastObservedTime: metav1.MicroTime{Time: testNow.Add(-ago)}}
		e.EventTime = metav1.MicroTime{Time: testNow.Add(-ago - time.Hour)}
	}
	b.c.Events = append(b.c.Events, e)
	return b
}

func uid(ns, name string) types.UID { return types.UID("uid-" + ns + "-" + name) }

func jobLabels(job string, index int) map[string]string {
	return map[string]string{LabelJobName: job, LabelJobCompletionIndex: fmt.Sprint(index)}
}

const bigMessage = `needs 3 pods with 12 gpu.gpufabric.dev devices in one gpufabric.dev/nvlinkDomain:
largest free 6 devices with room for 1 pods in dom-b (0 of 2 domains passed counts, 0 verified)`

// scenario is the fabric of most tests: NVLink domains dom-a (nodes a-0,
// a-1, rack-1) and dom-b (b-0, b-1, rack-2), 4 GPUs each, one IB leaf; 4
// channels per domain. A placed gang team-a/train of an Indexed Job (2 × 4
// GPUs on a-0, a-1, channel-0 of dom-a); a pod team-b/notebook with one GPU
// on b-1; gpu-3 of b-1 tainted; a waiting gang team-b/big (3 pending
// members, 1 gated); a pod team-b/ghost-0 naming a PodGroup that does not
// exist; a CPU node.
func scenario() *builder {
	b := newBuilder()
	for _, n := range []struct{ name, domain, rack string }{
		{"a-0", "dom-a", "rack-1"}, {"a-1", "dom-a", "rack-1"}, {"b-0", "dom-b", "rack-2"}, {"b-1", "dom-b", "rack-2"},
	} {
		b.node(n.name, n.domain, 4, map[string]string{rackKey: n.rack, leafKey: "leaf-1"})
	}
	b.c.Nodes = append(b.c.Nodes, corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "cpu-0"},
		Spec: corev1.NodeSpec{Unschedulable: true, Taints: []corev1.Taint{{Key: "example.com/cpu-only", Effect: corev1.TaintEffectNoSchedule}}}})
	b.channels("dom-a", 4).channels("dom-b", 4)
	b.taint("b-1", "gpu-3", topology.TaintNVLinkDegraded, "2-of-18-nvlinks-down", resourceapi.DeviceTaintEffectNoSchedule)
	b.c.Nodes[3].Spec.Taints = []corev1.Taint{{Key: "example.com/maintenance", Value: "planned", Effect: corev1.TaintEffectPreferNoSchedule}}

	b.group("team-a", "train", 2, cond(vocab.ConditionInitiallyScheduled, metav1.ConditionTrue, "Scheduled", "placed 2 pods in gpufabric.dev/nvlinkDomain dom-a"))
	b.claim("team-a", "train-fabric", []string{"podgroups/train"}, topology.FabricDomainPoolName("dom-a")+"/channel-0")
	for i, node := range []string{"a-1", "a-0"} { // rank 0 on a-1: ranks, not names, order members
		name := fmt.Sprintf("train-%s", []string{"x7k2p", "m4q9z"}[i])
		b.pod("team-a", name, "train", node, jobLabels("llm-train", i), "train-fabric", name+"-gpus")
		b.claim("team-a", name+"-gpus", []string{"pods/" + name}, node+"/gpu-0", node+"/gpu-1", node+"/gpu-2", node+"/gpu-3")
	}
	b.event("team-a", "train", corev1.EventTypeNormal, "Scheduled", "placed 2 pods in gpufabric.dev/nvlinkDomain dom-a", 1, 5*time.Minute)

	b.pod("team-b", "notebook", "", "b-1", nil, "notebook-gpu")
	b.claim("team-b", "notebook-gpu", []string{"pods/notebook"}, "b-1/gpu-0")

	b.group("team-b", "big", 3, cond(vocab.ConditionInitiallyScheduled, metav1.ConditionFalse, "Unschedulable", bigMessage))
	b.created("team-b", "big", 10*time.Minute, nil)
	b.claim("team-b", "big-fabric", nil)
	for i := range 4 {
		name := fmt.Sprintf("big-%d", i)
		b.pod("team-b", name, "big", "", nil, "big-fabric", name+"-gpus")
		b.claim("team-b", name+"-gpus", nil)
		if i < 3 {
			b.podScheduled("team-b", name, "Unschedulable", "gang team-b/big: "+bigMessage)
		}
	}
	b.gate("team-b", "big-3", "example.com/quota")
	b.podScheduled("team-b", "big-3", "SchedulingGated", "Scheduling is blocked due to non-empty scheduling gates")
	b.event("team-b", "big", corev1.EventTypeWarning, "FailedScheduling", strings.ReplaceAll(bigMessage, "\n", " "), 3, 30*time.Second)

	b.pod("team-b", "ghost-0", "ghost", "", nil)
	b.podScheduled("team-b", "ghost-0", "PodGroupNotFound", "pod group ghost does not exist (not created yet, or deleted): the pod waits for it")
	return b
}

var testLevels = Options{Levels: []string{rackKey, leafKey}}
