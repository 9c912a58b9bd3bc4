package cdi

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/gpufabric/gpufabric/pkg/claims"
	"github.com/gpufabric/gpufabric/pkg/claims/checkpoint"
	"github.com/gpufabric/gpufabric/pkg/topology"
)

func gpu(req string, minor int, uuid string) Device {
	name := topology.GPUDeviceName(minor)
	return Device{
		Result: checkpoint.Device{Request: req, Pool: "node-a", Device: name},
		Type:   topology.DeviceTypeGPU,
		Edits: claims.Edits{GPUUUID: uuid, DeviceNodes: []claims.DeviceNode{
			{Path: "/dev/nvidia" + name[4:]}, {Path: "/dev/nvidiactl"},
		}},
	}
}

func nic(req, ib string) Device {
	return Device{
		Result: checkpoint.Device{Request: req, Pool: "node-a", Device: topology.NICDeviceName(ib)},
		Type:   topology.DeviceTypeNIC,
		Edits:  claims.Edits{IBDevice: ib, DeviceNodes: []claims.DeviceNode{{Path: "/dev/infiniband/rdma_cm"}}},
	}
}

func TestBuildSpec(t *testing.T) {
	ref := ClaimRef{UID: "u1", Namespace: "ns", Name: "c"}
	devs := []Device{
		gpu("gpus", 0, "GPU-a"), gpu("gpus", 1, "GPU-b"), nic("nics", "mlx5_0"), nic("nics", "mlx5_1"),
		{
			Result: checkpoint.Device{Request: "fabric", Pool: "fabric-domain.d", Device: "channel-2", AdminAccess: true},
			Type:   topology.DeviceTypeFabricDomain,
		},
	}
	spec, ids, err := BuildSpec(ref, devs, nil)
	if err != nil {
		t.Fatal(err)
	}
	wantIDs := []string{
		"gpufabric.dev/claim=u1-gpu-0", "gpufabric.dev/claim=u1-gpu-1",
		"gpufabric.dev/claim=u1-nic-mlx5-0", "gpufabric.dev/claim=u1-nic-mlx5-1",
		"gpufabric.dev/claim=u1-channel-2",
	}
	if diff := cmp.Diff(wantIDs, ids); diff != "" {
		t.Errorf("ids (-want +got):\n%s", diff)
	}
	gpuEnv := []string{"NVIDIA_VISIBLE_DEVICES=GPU-a,GPU-b", "GPUFABRIC_GPU_UUIDS=GPU-a,GPU-b"}
	nicEnv := []string{"NCCL_IB_HCA==mlx5_0,mlx5_1", "GPUFABRIC_IB_DEVICES=mlx5_0,mlx5_1"}
	wantEnv := [][]string{gpuEnv, gpuEnv, nicEnv, nicEnv, {"GPUFABRIC_DEVICE=channel-2"}}
	for i, d := range spec.Devices {
		if diff := cmp.Diff(wantEnv[i], d.ContainerEdits.Env); diff != "" {
			t.Errorf("device %s env (-want +got):\n%s", d.Name, diff)
		}
	}
	if spec.Version != "0.6.0" {
		t.Errorf("version %q, want the minimum with annotations, 0.6.0", spec.Version)
	}
	got, err := ParseClaim(spec)
	if err != nil {
		t.Fatal(err)
	}
	if got.Devices[4].AdminAccess != true || got.UID != "u1" || got.Name != "c" {
		t.Errorf("ParseClaim lost data: %+v", got)
	}
}

// TestConfigEnv checks that a device's config variables come after the
// driver's and read back from the spec with ParseClaim (a rebuilt
// checkpoint entry then has the same fingerprint).
func TestConfigEnv(t *testing.T) {
	d := gpu("gpus", 0, "GPU-a")
	d.Result.ConfigEnv = []string{"NCCL_ALGO=Ring", "NCCL_DEBUG="}
	spec, _, err := BuildSpec(ClaimRef{UID: "u"}, []Device{d, gpu("other", 1, "GPU-b")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"NVIDIA_VISIBLE_DEVICES=GPU-a", "GPUFABRIC_GPU_UUIDS=GPU-a", "NCCL_ALGO=Ring", "NCCL_DEBUG="}
	if diff := cmp.Diff(want, spec.Devices[0].ContainerEdits.Env); diff != "" {
		t.Errorf("env (-want +got):\n%s", diff)
	}
	got, err := ParseClaim(spec)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(d.Result.ConfigEnv, got.Devices[0].ConfigEnv); diff != "" || got.Devices[1].ConfigEnv != nil {
		t.Errorf("parsed config env (-want +got):\n%s; other device %q", diff, got.Devices[1].ConfigEnv)
	}
	devs := []checkpoint.Device{d.Result, gpu("other", 1, "GPU-b").Result}
	if got.Fingerprint != checkpoint.Fingerprint(devs) {
		t.Error("the parsed claim's fingerprint differs from the prepared one")
	}
}

func TestBuildSpecDuplicateDeviceNames(t *testing.T) {
	d := gpu("r", 0, "GPU-a")
	d2 := d
	d2.Result.ShareID = "s2"
	_, ids, err := BuildSpec(ClaimRef{UID: "u"}, []Device{d, d2}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"gpufabric.dev/claim=u-gpu-0-0", "gpufabric.dev/claim=u-gpu-0-1"}, ids); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestDirWriteListRemove(t *testing.T) {
	dir, err := NewDir(t.TempDir(), true)
	if err != nil {
		t.Fatal(err)
	}
	ref := ClaimRef{UID: "0b7a3c2e-5d1f-4a8b-9c6e-2f4d8a1b3c5e", Namespace: "ns", Name: "c"}
	spec, ids, err := BuildSpec(ref, []Device{gpu("gpus", 3, "GPU-x")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := dir.Write(ref.UID, spec); err != nil {
		t.Fatal(err)
	}
	// Foreign and broken files next to ours.
	if err := os.WriteFile(filepath.Join(dir.root, "nvidia.com-gpu.json"), []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir.root, filePrefix+"broken.json"), []byte("{"), 0o644); err != nil {
		t.Fatal(err)
	}
	found, err := dir.List()
	if err != nil {
		t.Fatal(err)
	}
	if len(found) != 2 {
		t.Fatalf("found %d specs, want 2: %+v", len(found), found)
	}
	var good, bad int
	for _, f := range found {
		switch {
		case f.Err != nil:
			bad++
		case f.UID == ref.UID:
			good++
			if diff := cmp.Diff(ids, f.Claim.Devices[0].CDIDeviceIDs); diff != "" {
				t.Errorf("ids (-want +got):\n%s", diff)
			}
		}
	}
	if good != 1 || bad != 1 {
		t.Errorf("good=%d bad=%d, want 1 and 1", good, bad)
	}
	if err := dir.Remove(ref.UID); err != nil {
		t.Fatal(err)
	}
	if ok, err := dir.Exists(ref.UID); ok || err != nil {
		t.Errorf("Exists after Remove = %v, %v", ok, err)
	}
	if err := dir.Remove(ref.UID); err != nil {
		t.Errorf("second Remove: %v", err)
	}
}

func TestDirWriteRejectsInvalidSpec(t *testing.T) {
	dir, err := NewDir(t.TempDir(), false)
	if err != nil {
		t.Fatal(err)
	}
	bad := &cdispec.Spec{Version: "0.6.0", Kind: Kind, Devices: []cdispec.Device{{
		Name:           "u-gpu-0",
		ContainerEdits: cdispec.ContainerEdits{DeviceNodes: []*cdispec.DeviceNode{{Path: ""}}},
	}}}
	if err := dir.Write("u", bad); err == nil {
		t.Fatal("Write accepted a device node without path")
	}
	entries, _ := os.ReadDir(dir.root)
	if len(entries) != 0 {
		t.Errorf("files left behind: %v", entries)
	}
	if _, err := dir.Exists("u"); err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Error(err)
	}
}

func TestFilePrefix(t *testing.T) {
	if got := fileBase("u"); got != filePrefix+"u" {
		t.Errorf("spec file base %q does not start with %q", got, filePrefix)
	}
}
