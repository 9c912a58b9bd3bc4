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
		return r.withNodes(claims.Edits{GPUUUID: gpu.UUID}, gpu.DeviceNodes), nil
	case nic != nil:
		return r.withNodes(claims.Edits{IBDevice: nic.IBDevice}, nic.DeviceNodes), nil
	}
	return claims.Edits{}, fmt.Errorf("device %q on node %s: %w", deviceName, r.inv.Load().NodeName, claims.ErrUnknownDevice)
}

// withNodes adds the device nodes. On a real host they are device nodes.
// The mock's are regular files in its fake tree, which container runtimes
// refuse as CDI device nodes, so they are bind-mounted to the same /dev
// paths instead.
func (r *inventoryResolver) withNodes(e claims.Edits, hostPaths []string) claims.Edits {
	for _, host := range hostPaths {
		rel, mock := strings.CutPrefix(host, r.devRoot+"/")
		if !mock || r.devRoot == "/dev" {
			e.DeviceNodes = append(e.DeviceNodes, claims.DeviceNode{Path: host})
			continue
		}
		e.Mounts = append(e.Mounts, claims.Mount{HostPath: host, ContainerPath: "/dev/" + rel})
	}
	return e
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
