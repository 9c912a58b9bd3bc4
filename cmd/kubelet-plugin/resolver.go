package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync/atomic"

	"k8s.io/klog/v2"

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
	// mig makes and destroys MIG partitions (claims.DevicePreparer).
	mig *devices.MIGManager
}

var (
	_ claims.DeviceResolver = (*inventoryResolver)(nil)
	_ claims.DevicePreparer = (*inventoryResolver)(nil)
)

func newInventoryResolver(devRoot string, inv *devices.Inventory, mig *devices.MIGManager) *inventoryResolver {
	r := &inventoryResolver{devRoot: filepath.Clean(devRoot), mig: mig}
	r.inv.Store(inv)
	return r
}

// OnDemand implements claims.DevicePreparer: MIG partitions are made at
// prepare.
func (r *inventoryResolver) OnDemand(deviceName string) bool {
	g, _ := r.inv.Load().MIGPartition(deviceName)
	return g != nil
}

// PrepareDevice implements claims.DevicePreparer: it creates the
// partition's GPU instance (or finds it) and returns the parent's device
// nodes, the instance's nvidia-caps nodes (created by the runtime) and the
// MIG device's UUID.
func (r *inventoryResolver) PrepareDevice(ctx context.Context, deviceName string) (claims.Edits, error) {
	inv := r.inv.Load()
	g, part := inv.MIGPartition(deviceName)
	if g == nil {
		return claims.Edits{}, fmt.Errorf("device %q on node %s: %w", deviceName, inv.NodeName, claims.ErrUnknownDevice)
	}
	inst, err := r.mig.Create(ctx, *g, *part)
	if err != nil {
		return claims.Edits{}, err
	}
	e := r.withNodes(claims.Edits{GPUUUID: inst.UUID}, g.DeviceNodes)
	for _, c := range inst.Caps {
		e.DeviceNodes = append(e.DeviceNodes, claims.DeviceNode{
			Path: c.Path, Type: "c", Major: int64(c.Major), Minor: int64(c.Minor), FileMode: 0o444,
		})
	}
	return e, nil
}

// UnprepareDevice implements claims.DevicePreparer. A partition the
// inventory no longer has (its GPU left MIG mode or the node) has no
// instance to destroy.
func (r *inventoryResolver) UnprepareDevice(ctx context.Context, deviceName string) error {
	g, part := r.inv.Load().MIGPartition(deviceName)
	if g == nil {
		klog.FromContext(ctx).Info("MIG partition no longer published, nothing to destroy", "device", deviceName)
		return nil
	}
	return r.mig.Destroy(ctx, *g, *part)
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
