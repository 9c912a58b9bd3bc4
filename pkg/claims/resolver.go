package claims

import (
	"context"
	"errors"
	"os"
	"strings"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/gpufabric/gpufabric/pkg/topology"
)

// ErrUnknownDevice is returned (wrapped) by resolvers for a device name they
// do not know on this node.
var ErrUnknownDevice = errors.New("unknown device")

// DeviceNode is a device node to create in the container.
type DeviceNode struct {
	// Path is the path inside the container, e.g. /dev/nvidia3.
	Path string
	// HostPath is the path on the host; empty means the same as Path.
	// It must be a path in the host's mount namespace, not the plugin's.
	HostPath string
	// Permissions are the cgroup permissions ("rw", "rwm"); empty means rwm.
	Permissions string
	// Type "c" with Major and Minor is a character device the runtime
	// creates in the container without a node on the host (IMEX
	// channels); empty Type takes everything from the host's node.
	Type         string
	Major, Minor int64
	// FileMode of a created node; 0 means the runtime's default.
	FileMode os.FileMode
}

// Mount is a bind mount into the container.
type Mount struct {
	HostPath      string
	ContainerPath string
	// Options default to ["ro", "nosuid", "nodev", "bind"] when empty.
	Options []string
}

// Edits is what a container needs to use one device: device nodes, mounts and
// environment variables (KEY=VALUE). Resolvers also report the identity the
// claim code needs to build request-wide environment variables.
type Edits struct {
	// GPUUUID is the GPU's UUID ("GPU-…"); set for GPUs only. It is listed
	// in NVIDIA_VISIBLE_DEVICES.
	GPUUUID string
	// IBDevice is the kernel's RDMA device name ("mlx5_3"); set for NICs
	// only, and required for them to appear in NCCL_IB_HCA (the published
	// device name is sanitized to a DNS label, nic-mlx5-3).
	IBDevice string

	DeviceNodes []DeviceNode
	Mounts      []Mount
	Env         []string
}

// DeviceResolver maps a device published in the node's own pool
// (gpu-<minor>, nic-<ibdev>) to what a container needs to use it.
//
// Implementations must be safe for concurrent use. An unknown device name
// returns an error wrapping ErrUnknownDevice.
type DeviceResolver interface {
	ContainerEdits(deviceName string) (Edits, error)
}

// DevicePreparer is implemented by a DeviceResolver whose devices exist
// only while a claim holds them (MIG partitions: the GPU instance is
// created at prepare and destroyed at unprepare). For such a device the
// driver calls PrepareDevice instead of ContainerEdits, after the claim is
// recorded as PrepareStarted, so a crash in between is redone or rolled
// back from the checkpoint.
type DevicePreparer interface {
	// OnDemand reports whether deviceName is one PrepareDevice makes.
	OnDemand(deviceName string) bool
	// PrepareDevice creates the device, or finds the one an interrupted
	// attempt created, and returns its edits.
	PrepareDevice(ctx context.Context, deviceName string) (Edits, error)
	// UnprepareDevice destroys the device; one that does not exist is not
	// an error.
	UnprepareDevice(ctx context.Context, deviceName string) error
}

// DeviceResolverFunc adapts a function to DeviceResolver.
type DeviceResolverFunc func(deviceName string) (Edits, error)

// ContainerEdits implements DeviceResolver.
func (f DeviceResolverFunc) ContainerEdits(deviceName string) (Edits, error) { return f(deviceName) }

// ChannelResolver maps channel <n> of an NVLink domain (a device of the
// cluster-level pool fabric-domain.<domainID>) to what a container on this
// node needs to use the fabric. Implementations must be safe for concurrent
// use.
type ChannelResolver interface {
	ChannelEdits(domainID string, channel int) (Edits, error)
	// WaitReady waits, bounded, until the node can serve channels of
	// domainID (e.g. its IMEX daemon is ready) and returns why not. It is
	// called before the claim is prepared, outside the driver's lock.
	WaitReady(ctx context.Context, domainID string) error
}

// ClaimGetter reads a ResourceClaim from the API. It returns an error for
// which apierrors.IsNotFound is true when the claim does not exist. The cmd
// implements it with a client-go ResourceClaims(namespace).Get.
type ClaimGetter interface {
	GetClaim(ctx context.Context, namespace, name string) (*resourceapi.ResourceClaim, error)
}

// ClaimGetterFunc adapts a function to ClaimGetter.
type ClaimGetterFunc func(ctx context.Context, namespace, name string) (*resourceapi.ResourceClaim, error)

// GetClaim implements ClaimGetter.
func (f ClaimGetterFunc) GetClaim(ctx context.Context, namespace, name string) (*resourceapi.ResourceClaim, error) {
	return f(ctx, namespace, name)
}

// DomainKindOf tells the kind of an nvlinkDomain id: node-scoped ids are
// "<kind>.<node>" (topology.NodeDomainID), anything else is a multi-node
// NVLink id "<clusterUUID>.<cliqueID>" (topology.MNNVLDomainID).
func DomainKindOf(domainID string) topology.DomainKind {
	kind, _, _ := strings.Cut(domainID, ".")
	switch k := topology.DomainKind(kind); k {
	case topology.DomainKindNVSwitch, topology.DomainKindNone:
		return k
	}
	return topology.DomainKindMNNVL
}
