package cdi

import (
	"slices"
	"testing"

	oci "github.com/opencontainers/runtime-spec/specs-go"
	cdiapi "tags.cncf.io/container-device-interface/pkg/cdi"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/gpufabric/gpufabric/pkg/claims"
)

// driverEdits is what devices.DriverEdits (nvcdi) returns on a node, in
// short: control nodes, a library, a binary, the hooks.
func driverEdits() *cdispec.ContainerEdits {
	ro := []string{"ro", "nosuid", "nodev", "rbind", "rprivate"}
	hook := "/var/lib/gpufabric/bin/nvidia-cdi-hook"
	return &cdispec.ContainerEdits{
		Env:         []string{"NVIDIA_VISIBLE_DEVICES=void", "NVIDIA_CTK_LIBCUDA_DIR=/usr/lib/x86_64-linux-gnu"},
		DeviceNodes: []*cdispec.DeviceNode{{Path: "/dev/nvidiactl", Type: "c", Major: 195, Minor: 255}, {Path: "/dev/nvidia-uvm", Type: "c", Major: 508}},
		Mounts: []*cdispec.Mount{
			{HostPath: "/usr/lib/x86_64-linux-gnu/libcuda.so.560.35.03", ContainerPath: "/usr/lib/x86_64-linux-gnu/libcuda.so.560.35.03", Options: ro},
			{HostPath: "/usr/bin/nvidia-smi", ContainerPath: "/usr/bin/nvidia-smi", Options: ro},
		},
		Hooks: []*cdispec.Hook{
			{HookName: "createContainer", Path: hook, Args: []string{"nvidia-cdi-hook", "create-symlinks", "--link", "libcuda.so.1::/usr/lib/x86_64-linux-gnu/libcuda.so"}},
			{HookName: "createContainer", Path: hook, Args: []string{"nvidia-cdi-hook", "update-ldcache", "--folder", "/usr/lib/x86_64-linux-gnu"}},
		},
	}
}

// TestInjectWithDriverEdits writes a claim spec with the driver's edits
// and injects its devices into an OCI spec with the CDI library, as
// containerd and CRI-O do: the container gets the driver's mounts and
// hooks once, every device node once (the driver's control nodes and the
// GPUs' own are merged by path), GPUFABRIC_GPU_UUIDS, and
// NVIDIA_VISIBLE_DEVICES=void; a NIC-only claim gets none of the driver.
func TestInjectWithDriverEdits(t *testing.T) {
	dir := t.TempDir()
	d, err := NewDir(dir, false)
	if err != nil {
		t.Fatal(err)
	}
	// This machine has no such nodes: give the runtime their numbers, so
	// that the CDI library need not stat the host's.
	char := func(path string, major, minor int64) claims.DeviceNode {
		return claims.DeviceNode{Path: path, Type: "c", Major: major, Minor: minor}
	}
	gpuDevs := []Device{gpu("gpus", 0, "GPU-a"), gpu("gpus", 1, "GPU-b"), nic("nics", "mlx5_0")}
	gpuDevs[0].Edits.DeviceNodes = []claims.DeviceNode{char("/dev/nvidia0", 195, 0), char("/dev/nvidiactl", 195, 255), char("/dev/nvidia-uvm", 508, 0)}
	gpuDevs[1].Edits.DeviceNodes = []claims.DeviceNode{char("/dev/nvidia1", 195, 1), char("/dev/nvidiactl", 195, 255)}
	gpuDevs[2].Edits.DeviceNodes = []claims.DeviceNode{char("/dev/infiniband/rdma_cm", 231, 255)}
	spec, ids, err := BuildSpec(ClaimRef{UID: "u1", Namespace: "ns", Name: "c"}, gpuDevs, driverEdits())
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Write("u1", spec); err != nil {
		t.Fatal(err)
	}
	nic1 := nic("nics", "mlx5_1")
	nic1.Edits.DeviceNodes = []claims.DeviceNode{char("/dev/infiniband/rdma_cm", 231, 255)}
	nicSpec, nicIDs, err := BuildSpec(ClaimRef{UID: "u2", Namespace: "ns", Name: "n"}, []Device{nic1}, driverEdits())
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Write("u2", nicSpec); err != nil {
		t.Fatal(err)
	}
	cache, err := cdiapi.NewCache(cdiapi.WithSpecDirs(dir), cdiapi.WithAutoRefresh(false))
	if err != nil {
		t.Fatal(err)
	}
	inject := func(ids ...string) *oci.Spec {
		t.Helper()
		s := &oci.Spec{Process: &oci.Process{}, Linux: &oci.Linux{}}
		if unresolved, err := cache.InjectDevices(s, ids...); err != nil {
			t.Fatalf("inject %v: %v (unresolved %v)", ids, err, unresolved)
		}
		return s
	}

	got := inject(ids...)
	var nodes []string
	for _, dn := range got.Linux.Devices {
		nodes = append(nodes, dn.Path)
	}
	slices.Sort(nodes)
	if want := []string{"/dev/infiniband/rdma_cm", "/dev/nvidia-uvm", "/dev/nvidia0", "/dev/nvidia1", "/dev/nvidiactl"}; !slices.Equal(nodes, want) {
		t.Errorf("device nodes %v, want each once: %v", nodes, want)
	}
	if len(got.Mounts) != 2 || got.Hooks == nil || len(got.Hooks.CreateContainer) != 2 {
		t.Errorf("mounts %d, hooks %+v; want the driver's 2 mounts and 2 createContainer hooks once", len(got.Mounts), got.Hooks)
	}
	for _, want := range []string{"NVIDIA_VISIBLE_DEVICES=void", "GPUFABRIC_GPU_UUIDS=GPU-a,GPU-b", "NCCL_IB_HCA==mlx5_0"} {
		if !slices.Contains(got.Process.Env, want) {
			t.Errorf("env %v lacks %s", got.Process.Env, want)
		}
	}

	nicOnly := inject(nicIDs...)
	if len(nicOnly.Mounts) != 0 || nicOnly.Hooks != nil || slices.ContainsFunc(nicOnly.Process.Env, func(e string) bool { return e == "NVIDIA_VISIBLE_DEVICES=void" }) {
		t.Errorf("a NIC-only claim got driver edits: mounts %v, hooks %v, env %v", nicOnly.Mounts, nicOnly.Hooks, nicOnly.Process.Env)
	}
}
