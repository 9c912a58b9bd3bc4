package claims

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"github.com/gpufabric/gpufabric/pkg/topology"
)

// ErrWrongDomain is returned (wrapped) when a channel of another NVLink
// domain than the node's own is to be prepared.
var ErrWrongDomain = errors.New("channel belongs to another nvlink domain")

// Environment variables injected by gpufabric.
const (
	EnvVisibleDevices  = "NVIDIA_VISIBLE_DEVICES"
	EnvGPUUUIDs        = "GPUFABRIC_GPU_UUIDS"
	EnvIBDevices       = "GPUFABRIC_IB_DEVICES"
	EnvNCCLIBHCA       = "NCCL_IB_HCA"
	EnvFabricDomain    = "GPUFABRIC_FABRIC_DOMAIN"
	EnvFabricKind      = "GPUFABRIC_FABRIC_DOMAIN_KIND"
	EnvFabricChannel   = "GPUFABRIC_FABRIC_CHANNEL"
	EnvNCCLMNNVLEnable = "NCCL_MNNVL_ENABLE"
	EnvNCCLNVLSEnable  = "NCCL_NVLS_ENABLE"
)

// IMEXChannelPath is the host device node of IMEX channel n, created by the
// IMEX daemon (or the admin) on multi-node NVLink hosts.
func IMEXChannelPath(n int) string {
	return "/dev/nvidia-caps-imex-channels/channel" + strconv.Itoa(n)
}

// FabricChannelResolver is the default ChannelResolver. It is immutable and
// safe for concurrent use.
type FabricChannelResolver struct {
	// LocalDomainID is this node's nvlinkDomain. If set, channels of any
	// other domain are refused with ErrWrongDomain.
	LocalDomainID string
	// DevRoot is where the plugin sees the host's root file system ("/" or
	// "/host"); it is used only to check that an IMEX channel node exists.
	// Empty means "/".
	DevRoot string
}

var _ ChannelResolver = FabricChannelResolver{}

// ChannelEdits returns the fabric domain id and kind, the channel number,
// NCCL settings for the domain kind (multi-node NVLink: NCCL_MNNVL_ENABLE=1
// and NCCL_NVLS_ENABLE=1; NVSwitch: NCCL_NVLS_ENABLE=1) and the IMEX channel
// device node when the host has one.
func (r FabricChannelResolver) ChannelEdits(domainID string, channel int) (Edits, error) {
	if domainID == "" || channel < 0 {
		return Edits{}, fmt.Errorf("channel %d of domain %q: %w", channel, domainID, ErrUnknownDevice)
	}
	if r.LocalDomainID != "" && domainID != r.LocalDomainID {
		return Edits{}, fmt.Errorf("domain %q, node is in %q: %w", domainID, r.LocalDomainID, ErrWrongDomain)
	}
	kind := DomainKindOf(domainID)
	e := Edits{Env: []string{
		EnvFabricDomain + "=" + domainID,
		EnvFabricKind + "=" + string(kind),
		EnvFabricChannel + "=" + strconv.Itoa(channel),
	}}
	switch kind {
	case topology.DomainKindMNNVL:
		e.Env = append(e.Env, EnvNCCLMNNVLEnable+"=1", EnvNCCLNVLSEnable+"=1")
	case topology.DomainKindNVSwitch:
		e.Env = append(e.Env, EnvNCCLNVLSEnable+"=1")
	}
	root := r.DevRoot
	if root == "" {
		root = "/"
	}
	imex := IMEXChannelPath(channel)
	if _, err := os.Stat(filepath.Join(root, imex)); err == nil {
		e.DeviceNodes = append(e.DeviceNodes, DeviceNode{Path: imex, HostPath: imex})
	}
	return e, nil
}
