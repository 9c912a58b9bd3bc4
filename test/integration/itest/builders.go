package itest

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/gpufabric/gpufabric/pkg/topology"
)

// Builders for the objects the integration tests create. Each returns a
// complete, valid object; tests change what they care about.

// Node is a node with the allocatable CPU, memory and pods of a GPU node.
func Node(name string, labels map[string]string) *corev1.Node {
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Status: corev1.NodeStatus{
			Allocatable: corev1.ResourceList{
				corev1.ResourceCPU:    resource.MustParse("64"),
				corev1.ResourceMemory: resource.MustParse("512Gi"),
				corev1.ResourcePods:   resource.MustParse("110"),
			},
		},
	}
}

// GPUDeviceClass selects the GPUs of driver gpufabric.dev.
func GPUDeviceClass() *resourceapi.DeviceClass {
	return &resourceapi.DeviceClass{
		ObjectMeta: metav1.ObjectMeta{Name: topology.GPUDeviceClass},
		Spec: resourceapi.DeviceClassSpec{
			Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
				Expression: `device.driver == "gpufabric.dev" && device.attributes["gpufabric.dev"].type == "gpu"`,
			}}},
		},
	}
}

// GPUSlice is a node-local pool of n GPUs in one NVLink domain.
func GPUSlice(nodeName, domain string, n int) *resourceapi.ResourceSlice {
	devices := make([]resourceapi.Device, n)
	for i := range devices {
		devices[i] = resourceapi.Device{
			Name: topology.GPUDeviceName(i),
			Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
				topology.AttrType:             {StringValue: ptr.To(topology.DeviceTypeGPU)},
				topology.AttrNVLinkDomain:     {StringValue: ptr.To(domain)},
				topology.AttrNVLinkDomainKind: {StringValue: ptr.To(string(topology.DomainKindMNNVL))},
				topology.AttrIBRail:           {IntValue: ptr.To(int64(i))},
			},
			Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
				topology.CapacityMemory: {Value: resource.MustParse("189471Mi")},
			},
		}
	}
	return &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: nodeName + "-" + topology.DriverName},
		Spec: resourceapi.ResourceSliceSpec{
			Driver:   topology.DriverName,
			NodeName: ptr.To(nodeName),
			Pool:     resourceapi.ResourcePool{Name: nodeName, ResourceSliceCount: 1},
			Devices:  devices,
		},
	}
}

// GPUClaim requests count GPUs.
func GPUClaim(namespace, name string, count int64) *resourceapi.ResourceClaim {
	return &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{
			Requests: []resourceapi.DeviceRequest{{
				Name: "gpus",
				Exactly: &resourceapi.ExactDeviceRequest{
					DeviceClassName: topology.GPUDeviceClass,
					AllocationMode:  resourceapi.DeviceAllocationModeExactCount,
					Count:           count,
				},
			}},
		}},
	}
}

// PodGroup is a gang of minCount with one shared claim and a topology key.
func PodGroup(namespace, name string, minCount int32, sharedClaim string) *schedulingv1beta1.PodGroup {
	return &schedulingv1beta1.PodGroup{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec: schedulingv1beta1.PodGroupSpec{
			SchedulingPolicy: schedulingv1beta1.PodGroupSchedulingPolicy{
				Gang: &schedulingv1beta1.GangSchedulingPolicy{MinCount: minCount},
			},
			SchedulingConstraints: &schedulingv1beta1.PodGroupSchedulingConstraints{
				Topology: []schedulingv1beta1.TopologyConstraint{{Key: string(topology.Qualified(topology.AttrNVLinkDomain))}},
			},
			ResourceClaims: []schedulingv1beta1.PodGroupResourceClaim{{
				Name: "fabric", ResourceClaimName: ptr.To(sharedClaim),
			}},
		},
	}
}

// GangPod is a member of PodGroup using the group's shared claim.
func GangPod(namespace, name, group string) *corev1.Pod {
	return MemberPod(namespace, name, group, "fabric", group+"-fabric")
}

// MemberPod is a pod of group whose container uses one existing claim,
// referenced in the pod as podClaim.
func MemberPod(namespace, name, group, podClaim, claim string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec: corev1.PodSpec{
			SchedulerName:   topology.SchedulerName,
			SchedulingGroup: &corev1.PodSchedulingGroup{PodGroupName: ptr.To(group)},
			Containers: []corev1.Container{{
				Name: "train", Image: "registry.example/train:1",
				Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: podClaim}}},
			}},
			ResourceClaims: []corev1.PodResourceClaim{{Name: podClaim, ResourceClaimName: ptr.To(claim)}},
		},
	}
}

// ReservedForPodGroup is the consumer reference of a group-shared claim.
func ReservedForPodGroup(pg *schedulingv1beta1.PodGroup) resourceapi.ResourceClaimConsumerReference {
	return resourceapi.ResourceClaimConsumerReference{
		APIGroup: schedulingv1beta1.GroupName, Resource: "podgroups", Name: pg.Name, UID: pg.UID,
	}
}

// BindAs is a request binding pod ns/name (uid) to node, as client c.
func BindAs(c kubernetes.Interface, ns, name string, uid types.UID, node string) func(context.Context) error {
	return func(ctx context.Context) error {
		return c.CoreV1().Pods(ns).Bind(ctx, &corev1.Binding{
			ObjectMeta: metav1.ObjectMeta{Name: name, UID: uid},
			Target:     corev1.ObjectReference{Kind: "Node", Name: node},
		}, metav1.CreateOptions{})
	}
}

// FabricDomainSlice is a cluster-level pool of one channel selecting nodes
// by hostname, as the fabric-domain publisher writes them.
func FabricDomainSlice(pool string, nodes ...string) *resourceapi.ResourceSlice {
	return &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: pool},
		Spec: resourceapi.ResourceSliceSpec{
			Driver: topology.DriverName,
			Pool:   resourceapi.ResourcePool{Name: pool, ResourceSliceCount: 1},
			NodeSelector: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
				MatchExpressions: []corev1.NodeSelectorRequirement{{Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn, Values: nodes}},
			}}},
			Devices: []resourceapi.Device{{
				Name: "channel-0",
				Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
					topology.AttrType: {StringValue: ptr.To(topology.DeviceTypeFabricDomain)},
				},
			}},
		},
	}
}
