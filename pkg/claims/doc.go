// Package claims holds gpufabric's ResourceClaim lifecycle.
//
// This package itself only defines the small interfaces the node-side claim
// code needs from the rest of the system, so that the hardware discovery in
// pkg/devices and the API client in cmd/ can be wired in without pkg/claims
// importing them:
//
//   - [DeviceResolver] maps a node-local device (gpu-<minor>, nic-<ibdev>) to
//     the container edits that make it usable,
//   - [ChannelResolver] does the same for a fabric-domain channel,
//   - [ClaimGetter] reads a ResourceClaim from the API (optional, used when
//     the node state is rebuilt after a corrupted checkpoint).
//
// Subpackages:
//   - checkpoint: the versioned, checksummed record of prepared claims,
//   - cdi: one CDI spec file per prepared claim,
//   - config: the driver's opaque configuration (FabricConfig: NCCL
//     variables from DeviceClass and ResourceClaim configs),
//   - node: the kubeletplugin.DRAPlugin implementation.
package claims
