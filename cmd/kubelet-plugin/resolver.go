package main

import (
	"fmt"
	"path/filepath"
	"strings"
	"sync/atomic"

	"github.com/gpufabric/gpufabric/pkg/claims"
	"github.com/gpufabric/gpufabric/pkg/devices"
)

// inventoryResolver answers claims.DeviceResolver from the newest discovered
// inventory. It is the only place where pkg/devices meets pkg/claims. Safe
// for concurrent use: the inventory is swapped atomically after rediscovery.
type inventoryResolver struct {
	// devRoot is where the plugin sees the host's device nodes ("/dev", or
	// the mock tree's dev dir). Container paths are always under /dev.
	devRoot string
	inv     atomic.Pointer[devices.Inventory]
}

var _ claims.DeviceResolver = (*inventoryResolver)(nil)

func newInventoryResolver(devRoot string, inv *devices.Inventory) *inventoryResolver {
	r := &inventoryResolver{devRoot: filepath.Clean(devRoot)}
	r.inv.Store(inv)
	return r
}

func (r *inventoryResolver) update(inv *devices.Inventory) { r.inv.Store(inv) }

// ContainerEdits implements claims.DeviceResolver.
func (r *inventoryResolver) ContainerEdits(deviceName string) (claims.Edits, error) {
	gpu, nic := r.inv.Load().Device(deviceName)
	switch {
	case gpu != nil:
		return claims.Edits{GPUUUID: gpu.UUID, DeviceNodes: r.deviceNodes(gpu.DeviceNodes)}, nil
	case nic != nil:
		return claims.Edits{IBDevice: nic.IBDevice, DeviceNodes: r.deviceNodes(nic.DeviceNodes)}, nil
	}
	return claims.Edits{}, fmt.Errorf("device %q on node %s: %w", deviceName, r.inv.Load().NodeName, claims.ErrUnknownDevice)
}

// deviceNodes maps host paths under devRoot to container paths under /dev.
func (r *inventoryResolver) deviceNodes(hostPaths []string) []claims.DeviceNode {
	out := make([]claims.DeviceNode, 0, len(hostPaths))
	for _, host := range hostPaths {
		node := claims.DeviceNode{Path: host}
		if rel, ok := strings.CutPrefix(host, r.devRoot+"/"); ok && r.devRoot != "/dev" {
			node = claims.DeviceNode{Path: "/dev/" + rel, HostPath: host}
		}
		out = append(out, node)
	}
	return out
}

// localDomain is the node's NVLink domain: that of its first GPU.
func localDomain(inv *devices.Inventory) string {
	for _, g := range inv.GPUs {
		if g.NVLink.Domain != "" {
			return g.NVLink.Domain
		}
	}
	return ""
}
