package mock

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/dynamic-resource-allocation/resourceslice"

	"github.com/gpufabric/gpufabric/pkg/devices"
)

// Backend is one node of a fabric as discovery sees it: a mock NVML and a
// fake sysfs and /dev tree on disk.
type Backend struct {
	server     *server.Server
	sysfsRoot  string
	devRoot    string
	procRoot   string
	driverRoot string
	imexState  string
}

var _ devices.Backend = (*Backend)(nil)

// NVML implements devices.Backend.
func (b *Backend) NVML() nvml.Interface { return b.server }

// SysfsRoot implements devices.Backend.
func (b *Backend) SysfsRoot() string { return b.sysfsRoot }

// DevRoot implements devices.Backend.
func (b *Backend) DevRoot() string { return b.devRoot }

// ProcRoot implements devices.Backend.
func (b *Backend) ProcRoot() string { return b.procRoot }

// DriverRoot implements devices.Backend: the fake driver installation.
func (b *Backend) DriverRoot() string { return b.driverRoot }

// IMEXStatus implements devices.Backend as nvidia-imex-ctl -q would answer
// on this node: the status file the fake tree holds (READY, NOT_READY; see
// the imex fault), or an error when the node runs no IMEX daemon. It reads
// the file on every call, so a process that rewrites the tree from an
// edited fabric file sees the new state.
func (b *Backend) IMEXStatus(context.Context) (string, error) {
	data, err := os.ReadFile(b.imexState)
	if err != nil {
		return "", fmt.Errorf("nvidia-imex-ctl: no imex daemon answers: %w", err)
	}
	return devices.FirstLine(string(data)), nil
}

// GPUFabricInfo implements devices.Backend through the device's
// GetGpuFabricInfo (V1) call, which the mock sets.
func (b *Backend) GPUFabricInfo(dev nvml.Device) (devices.FabricInfo, nvml.Return) {
	info, ret := dev.GetGpuFabricInfo()
	if ret != nvml.SUCCESS {
		return devices.FabricInfo{}, ret
	}
	return devices.FabricInfoFromV1(info), nvml.SUCCESS
}

// Server is the mock NVML server, for tests that change a call.
func (b *Backend) Server() *server.Server { return b.server }

// Backend builds the named node: it writes the fake trees to <dir>/sys and
// <dir>/dev (which must not exist yet) and returns a Backend over them.
func (f *Fabric) Backend(nodeName, dir string) (*Backend, error) {
	return f.backendAt(nodeName, dir, dir)
}

// Refresh builds the named node anew in place of the trees at dir, for a
// process that re-reads an edited fabric file: the new trees are written
// beside dir and exchanged with it in one step (renameat2
// RENAME_EXCHANGE), so a reader of dir sees the old trees or the new ones,
// never a half-written tree or none.
func (f *Fabric) Refresh(nodeName, dir string) (*Backend, error) {
	next := dir + ".next"
	if err := os.RemoveAll(next); err != nil {
		return nil, fmt.Errorf("node %s: clear %s: %w", nodeName, next, err)
	}
	b, err := f.backendAt(nodeName, next, dir)
	if err != nil {
		return nil, errors.Join(err, os.RemoveAll(next))
	}
	err = unix.Renameat2(unix.AT_FDCWD, next, unix.AT_FDCWD, dir, unix.RENAME_EXCHANGE)
	if errors.Is(err, unix.ENOENT) {
		err = os.Rename(next, dir) // the first build
	}
	if err != nil {
		return nil, fmt.Errorf("node %s: swap in new trees: %w", nodeName, err)
	}
	if err := os.RemoveAll(next); err != nil {
		return nil, fmt.Errorf("node %s: remove old trees: %w", nodeName, err)
	}
	return b, nil
}

// backendAt writes the node's trees under writeDir and returns a Backend
// whose paths are under dir (where the trees will be).
func (f *Fabric) backendAt(nodeName, writeDir, dir string) (*Backend, error) {
	n, ok := f.index[nodeName]
	if !ok {
		return nil, fmt.Errorf("%s: node %s: not in the fabric", f.path, nodeName)
	}
	sys, dev, proc, drv := filepath.Join(writeDir, "sys"), filepath.Join(writeDir, "dev"), filepath.Join(writeDir, "proc"), filepath.Join(writeDir, "driver")
	for _, p := range []string{sys, dev, proc, drv} {
		if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("node %s: fake tree %s already exists", nodeName, p)
		}
	}
	lay := n.layout()
	if err := n.writeSysfs(sys, lay); err != nil {
		return nil, fmt.Errorf("node %s: %w", nodeName, err)
	}
	if err := n.writeDev(dev); err != nil {
		return nil, fmt.Errorf("node %s: %w", nodeName, err)
	}
	if err := n.writeProc(proc); err != nil {
		return nil, fmt.Errorf("node %s: %w", nodeName, err)
	}
	server := n.newServer(lay, f.path)
	write := writeDriver
	if n.faults.driverMissing {
		write = func(root, _ string) error { return os.MkdirAll(root, 0o755) }
	}
	if err := write(drv, server.DriverVersion); err != nil {
		return nil, fmt.Errorf("node %s: %w", nodeName, err)
	}
	proc = filepath.Join(dir, "proc")
	return &Backend{
		server: server, sysfsRoot: filepath.Join(dir, "sys"), devRoot: filepath.Join(dir, "dev"), procRoot: proc, driverRoot: filepath.Join(dir, "driver"),
		imexState: filepath.Join(proc, imexStatusFile),
	}, nil
}

// NodeResources is one node of a fabric after discovery: its Node object
// (labels, allocatable), inventory, DriverResources and ResourceSlices.
type NodeResources struct {
	Node      *corev1.Node
	Inventory *devices.Inventory
	Resources *resourceslice.DriverResources
	Slices    []resourceapi.ResourceSlice
}

// DiscoverNode builds the node under <dir>/<nodeName> and runs discovery
// on it.
func (f *Fabric) DiscoverNode(ctx context.Context, nodeName, dir string) (*NodeResources, error) {
	b, err := f.Backend(nodeName, filepath.Join(dir, nodeName))
	if err != nil {
		return nil, err
	}
	inv, err := devices.Discover(ctx, b, nodeName)
	if err != nil {
		return nil, fmt.Errorf("node %s: discover: %w", nodeName, err)
	}
	dr := inv.DriverResources()
	return &NodeResources{
		Node:      f.nodeObject(nodeName),
		Inventory: inv,
		Resources: dr,
		Slices:    devices.ResourceSlices(nodeName, dr),
	}, nil
}

// DiscoverAll runs DiscoverNode for every node, in file order. dir holds
// one subdirectory per node (use t.TempDir()).
func (f *Fabric) DiscoverAll(ctx context.Context, dir string) ([]NodeResources, error) {
	out := make([]NodeResources, 0, len(f.nodes))
	for _, n := range f.nodes {
		nr, err := f.DiscoverNode(ctx, n.name, dir)
		if err != nil {
			return nil, err
		}
		out = append(out, *nr)
	}
	return out, nil
}

// nodeObject is the node's Node: labels from the file plus
// kubernetes.io/hostname, capacity = allocatable from the file or model.
func (f *Fabric) nodeObject(name string) *corev1.Node {
	n := f.index[name]
	return &corev1.Node{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Node"},
		ObjectMeta: metav1.ObjectMeta{Name: n.name, Labels: n.nodeLabels()},
		Status: corev1.NodeStatus{
			Capacity:    n.allocatable.DeepCopy(),
			Allocatable: n.allocatable.DeepCopy(),
		},
	}
}
