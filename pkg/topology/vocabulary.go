// Package topology is gpufabric's shared vocabulary: the driver and class
// names, the device attributes the kubelet plugin publishes and the scheduler
// reads, NVLink domain identifiers, device taint keys, and the fabric tree
// built from ResourceSlices and Node labels.
//
// Rules: this package imports no client-go and no NVML. Everything in it is
// pure and safe for concurrent use.
package topology

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
)

// Names fixed by the architecture.
const (
	// DriverName is the DRA driver name and the attribute domain.
	DriverName = "gpufabric.dev"
	// SchedulerName is the pod.spec.schedulerName the scheduler serves.
	SchedulerName = "gpufabric-scheduler"

	GPUDeviceClass          = "gpu." + DriverName
	NICDeviceClass          = "nic." + DriverName
	FabricDomainDeviceClass = "fabric-domain." + DriverName
	MIGDeviceClass          = "mig." + DriverName
)

// Device types, the value of the AttrType attribute.
const (
	DeviceTypeGPU          = "gpu"
	DeviceTypeNIC          = "nic"
	DeviceTypeFabricDomain = "fabric-domain"
	// DeviceTypeMIG is a MIG partition of a MIG-enabled GPU (one GPU
	// instance profile at one placement), published with shared counters.
	DeviceTypeMIG = "mig"
)

// Attribute names as published (unqualified, in the driver's domain).
// Reference them from CEL or constraints through Qualified.
const (
	AttrType                  resourceapi.QualifiedName = "type"
	AttrUUID                  resourceapi.QualifiedName = "uuid"
	AttrProductName           resourceapi.QualifiedName = "productName"
	AttrArchitecture          resourceapi.QualifiedName = "architecture"
	AttrCUDAComputeCapability resourceapi.QualifiedName = "cudaComputeCapability"
	AttrDriverVersion         resourceapi.QualifiedName = "driverVersion"
	AttrIndex                 resourceapi.QualifiedName = "index"
	AttrNVLinkDomain          resourceapi.QualifiedName = "nvlinkDomain"
	AttrNVLinkDomainKind      resourceapi.QualifiedName = "nvlinkDomainKind"
	AttrIBRail                resourceapi.QualifiedName = "ibRail"
	AttrIBDevice              resourceapi.QualifiedName = "ibDevice"
	AttrLinkLayer             resourceapi.QualifiedName = "linkLayer"
	AttrRateGbps              resourceapi.QualifiedName = "rateGbps"
	AttrPortState             resourceapi.QualifiedName = "portState"
	AttrNodeGUID              resourceapi.QualifiedName = "nodeGUID"
	AttrMIGEnabled            resourceapi.QualifiedName = "migEnabled"
	// AttrFabricErrors is how many link errors a GPU's NVLinks or a NIC's
	// port counted in the plugin's last --fabric-error-window (int).
	AttrFabricErrors resourceapi.QualifiedName = "fabricErrors"
	// MIG partitions: the profile ("1g.10gb"), the placement's first
	// memory slice, and the parent GPU.
	AttrMIGProfile     resourceapi.QualifiedName = "migProfile"
	AttrMIGStart       resourceapi.QualifiedName = "migPlacementStart"
	AttrParentUUID     resourceapi.QualifiedName = "parentUUID"
	AttrParentDevice   resourceapi.QualifiedName = "parentDevice"
	CapacityMultiprocs resourceapi.QualifiedName = "multiprocessors"
	// Fabric-domain channel devices (cluster-level pools).
	AttrNodeCount resourceapi.QualifiedName = "nodeCount"
	AttrGPUCount  resourceapi.QualifiedName = "gpuCount"

	// CapacityMemory is a GPU's memory in bytes.
	CapacityMemory resourceapi.QualifiedName = "memory"
)

// Qualified returns the fully qualified name of one of the driver's attributes,
// as CEL expressions and matchAttribute constraints spell it
// ("gpufabric.dev/nvlinkDomain").
func Qualified(name resourceapi.QualifiedName) resourceapi.FullyQualifiedName {
	return resourceapi.FullyQualifiedName(DriverName + "/" + string(name))
}

// DomainKind says what kind of NVLink domain a GPU belongs to.
type DomainKind string

const (
	// DomainKindMNNVL is a multi-node NVLink domain (GB200 NVL72-class): the
	// GPUs of several nodes that share one (cluster UUID, clique id).
	DomainKindMNNVL DomainKind = "mnnvl"
	// DomainKindNVSwitch is one node's NVSwitch domain (HGX/DGX).
	DomainKindNVSwitch DomainKind = "nvswitch"
	// DomainKindNone means no NVLink fabric: the domain is the node itself.
	DomainKindNone DomainKind = "none"
)

// Device taint keys. Their values say what is wrong in words.
const (
	TaintFabricNotCompleted = DriverName + "/fabric-not-completed"
	TaintNVLinkDegraded     = DriverName + "/nvlink-degraded"
	TaintPortDown           = DriverName + "/port-down"
	TaintNVMLError          = DriverName + "/nvml-error"
	// Taints from GPU events (NVML event sets): their effect says whether
	// running pods must go (NoExecute) or only new ones stay away.
	TaintXID     = DriverName + "/xid"
	TaintECC     = DriverName + "/ecc"
	TaintGPULost = DriverName + "/gpu-lost"
	// TaintFabricErrors: a device's link error counters rose past the
	// plugin's --fabric-error-threshold within its window; the value names
	// the counter that rose most ("symbol_error").
	TaintFabricErrors = DriverName + "/fabric-errors"
)

// MaxAttributeValueLength is the API's limit for string attribute values.
const MaxAttributeValueLength = 64

// MNNVLDomainID is the nvlinkDomain of a multi-node NVLink clique:
// "<clusterUUID>.<cliqueID>". clusterUUID is the canonical 36-character form.
func MNNVLDomainID(clusterUUID string, cliqueID uint32) string {
	return fmt.Sprintf("%s.%d", strings.ToLower(clusterUUID), cliqueID)
}

// NodeDomainID is the nvlinkDomain of a node-scoped domain (an NVSwitch node,
// or a node without NVLink): "<kind>.<nodeName>". Node names longer than the
// attribute limit allows are shortened with a stable hash suffix.
func NodeDomainID(kind DomainKind, nodeName string) string {
	id := string(kind) + "." + nodeName
	if len(id) <= MaxAttributeValueLength {
		return id
	}
	sum := sha256.Sum256([]byte(nodeName))
	suffix := "-" + hex.EncodeToString(sum[:])[:10]
	return id[:MaxAttributeValueLength-len(suffix)] + suffix
}

// Device names as published in a node's pool and in fabric-domain pools.
func GPUDeviceName(minor int) string       { return fmt.Sprintf("gpu-%d", minor) }
func NICDeviceName(ibDevice string) string { return "nic-" + dnsLabelPart(ibDevice) }
func ChannelDeviceName(n int) string       { return fmt.Sprintf("channel-%d", n) }

// MIGDeviceName names a MIG partition: GPU instance profile (e.g.
// "1g.10gb+me") at its placement's first memory slice on GPU minor:
// "gpu-0-mig-1g-10gb-me-3".
func MIGDeviceName(minor int, profile string, start int) string {
	return fmt.Sprintf("gpu-%d-mig-%s-%d", minor, dnsLabelPart(profile), start)
}

// MIGCounterSetName is the counter set of a MIG-enabled GPU's memory
// slices.
func MIGCounterSetName(minor int) string { return fmt.Sprintf("gpu-%d-mig", minor) }

// dnsLabelPart lowercases s and replaces every character a DNS label does
// not allow with '-': device names must be RFC 1123 labels, and RDMA device
// names are not ("mlx5_0" becomes "mlx5-0").
func dnsLabelPart(s string) string {
	b := []byte(strings.ToLower(s))
	for i, c := range b {
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') {
			b[i] = '-'
		}
	}
	return string(b)
}

// FabricDomainPoolName is the pool name of the cluster-level pool that holds
// the channels of one NVLink domain.
func FabricDomainPoolName(domainID string) string {
	return fabricDomainPoolPrefix + domainID
}

const fabricDomainPoolPrefix = "fabric-domain."

// IsFabricDomainPool reports whether a pool of driver DriverName is a
// fabric-domain pool (FabricDomainPoolName), whose devices are channels.
func IsFabricDomainPool(pool string) bool { return strings.HasPrefix(pool, fabricDomainPoolPrefix) }

// IsGPUDeviceName reports whether a device of a node's pool of driver
// DriverName is a GPU or one of its MIG partitions (GPUDeviceName,
// MIGDeviceName).
func IsGPUDeviceName(name string) bool { return strings.HasPrefix(name, "gpu-") }
