package node

import (
	"encoding/json"
	"errors"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/runtime"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/gpufabric/gpufabric/pkg/topology"
)

// config adds an opaque config to the claim's allocation.
func (b *claimBuilder) config(source resourceapi.AllocationConfigSource, driver, params string, requests ...string) *claimBuilder {
	cfgs := &b.rc.Status.Allocation.Devices.Config
	*cfgs = append(*cfgs, resourceapi.DeviceAllocationConfiguration{
		Source: source, Requests: requests,
		DeviceConfiguration: resourceapi.DeviceConfiguration{Opaque: &resourceapi.OpaqueDeviceConfiguration{
			Driver: driver, Parameters: runtime.RawExtension{Raw: []byte(params)},
		}},
	})
	return b
}

func fabricConfig(env string) string {
	return `{"apiVersion": "gpufabric.dev/v1alpha1", "kind": "FabricConfig", "ncclEnv": {` + env + `}}`
}

const (
	fromClass = resourceapi.AllocationConfigSourceClass
	fromClaim = resourceapi.AllocationConfigSourceClaim
)

// specEnv reads a claim's CDI spec: each device's env, by device.
func specEnv(t *testing.T, path string) map[string][]string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var spec cdispec.Spec
	if err := json.Unmarshal(data, &spec); err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for _, d := range spec.Devices {
		out[d.Annotations["gpufabric.dev/device"]] = d.ContainerEdits.Env
	}
	return out
}

// TestPrepareAppliesConfigs checks that gpufabric.dev configs add their
// variables after the driver's own, per request, class before claim, and
// that other drivers' configs are ignored.
func TestPrepareAppliesConfigs(t *testing.T) {
	e := newEnv(t)
	d := e.driver()
	rc := newClaim("cfg").gpus("gpus", 0).nics("nics", "mlx5_0").
		config(fromClaim, topology.DriverName, fabricConfig(`"NCCL_DEBUG": "WARN"`), "gpus").
		config(fromClass, topology.DriverName, fabricConfig(`"NCCL_DEBUG": "INFO", "NCCL_ALGO": "Ring"`)).
		config(fromClaim, "gpu.nvidia.com", `{"sharing": "whatever"}`).obj()
	mustPrepare(t, e.ctx, d, rc)
	want := map[string][]string{
		"gpu-0": {
			"NVIDIA_VISIBLE_DEVICES=GPU-00000000-0000-0000-0000-000000000000",
			"GPUFABRIC_GPU_UUIDS=GPU-00000000-0000-0000-0000-000000000000",
			"NCCL_ALGO=Ring", "NCCL_DEBUG=WARN",
		},
		"nic-mlx5-0": {"NCCL_IB_HCA==mlx5_0", "GPUFABRIC_IB_DEVICES=mlx5_0", "NCCL_ALGO=Ring", "NCCL_DEBUG=INFO"},
	}
	if diff := cmp.Diff(want, specEnv(t, e.specPath(rc.UID))); diff != "" {
		t.Errorf("CDI env (-want +got):\n%s", diff)
	}
	entry := e.loadCheckpoint().Claims[rc.UID]
	if entry == nil || !slices.Equal(entry.Devices[0].ConfigEnv, []string{"NCCL_ALGO=Ring", "NCCL_DEBUG=WARN"}) {
		t.Errorf("checkpoint entry = %+v, want the gpu's config env recorded", entry)
	}
	again := mustPrepare(t, e.ctx, d, rc)
	if len(again[rc.UID].Devices) != 2 {
		t.Errorf("idempotent prepare = %+v", again[rc.UID])
	}
}

// TestPrepareRefusesInvalidConfigs checks that an invalid gpufabric.dev
// config fails its claim with an error naming the claim, the config's
// position and the field, and leaves nothing behind; the other claim of
// the batch is prepared.
func TestPrepareRefusesInvalidConfigs(t *testing.T) {
	tests := map[string]struct {
		source  resourceapi.AllocationConfigSource
		params  string
		wantErr string
	}{
		"unknown field":       {source: fromClaim, params: `{"apiVersion": "gpufabric.dev/v1alpha1", "kind": "FabricConfig", "ncclEnvs": {}}`, wantErr: `config[1] (FromClaim): parameters: unknown field "ncclEnvs"`},
		"unknown api version": {source: fromClass, params: `{"apiVersion": "gpufabric.dev/v2", "kind": "FabricConfig"}`, wantErr: `config[1] (FromClass): apiVersion: "gpufabric.dev/v2" is not "gpufabric.dev/v1alpha1"`},
		"unknown kind":        {source: fromClaim, params: `{"apiVersion": "gpufabric.dev/v1alpha1", "kind": "GpuConfig"}`, wantErr: `config[1] (FromClaim): kind: "GpuConfig"`},
		"not json":            {source: fromClaim, params: `ncclEnv: {}`, wantErr: "config[1] (FromClaim): parameters: "},
		"driver's own key":    {source: fromClaim, params: fabricConfig(`"NCCL_IB_HCA": "mlx5_9"`), wantErr: "config[1] (FromClaim): ncclEnv[NCCL_IB_HCA]: set by the driver"},
		"bad key":             {source: fromClaim, params: fabricConfig(`"LD_PRELOAD": "/evil.so"`), wantErr: `config[1] (FromClaim): ncclEnv["LD_PRELOAD"]: key must match`},
		"multi-line value":    {source: fromClass, params: fabricConfig(`"NCCL_DEBUG": "INFO\nLD_PRELOAD=/evil.so"`), wantErr: "config[1] (FromClass): ncclEnv[NCCL_DEBUG]: value"},
		"unknown source":      {source: "FromElsewhere", params: fabricConfig(``), wantErr: `config[1] (FromElsewhere): source: "FromElsewhere" is not FromClass or FromClaim`},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t)
			d := e.driver()
			bad := newClaim("bad").gpus("gpus", 0).
				config(fromClass, topology.DriverName, fabricConfig(`"NCCL_DEBUG": "INFO"`)).
				config(tc.source, topology.DriverName, tc.params).obj()
			good := newClaim("good").gpus("gpus", 1).obj()
			res := prepare(t, e.ctx, d, bad, good)
			err := res[bad.UID].Err
			if !errors.Is(err, ErrConfig) || reason(err) != "config" {
				t.Fatalf("error = %v, want ErrConfig", err)
			}
			if msg := err.Error(); !strings.HasPrefix(msg, "prepare claim default/bad: ") || !strings.Contains(msg, tc.wantErr) {
				t.Errorf("error %q does not name the claim and contain %q", msg, tc.wantErr)
			}
			if e.specExists(bad.UID) || e.loadCheckpoint().Claims[bad.UID] != nil {
				t.Error("the refused claim left a spec or a checkpoint entry")
			}
			if res[good.UID].Err != nil || !e.specExists(good.UID) {
				t.Errorf("the other claim of the batch: %v", res[good.UID].Err)
			}
		})
	}
}

// TestConfigEnvSurvivesRebootAndCorruption checks that a claim redone from
// the checkpoint after a reboot, and one rebuilt from its CDI spec after
// the checkpoint was corrupted, keep their config variables.
func TestConfigEnvSurvivesRebootAndCorruption(t *testing.T) {
	e := newEnv(t)
	rc := newClaim("cfg").gpus("gpus", 0).
		config(fromClaim, topology.DriverName, fabricConfig(`"NCCL_DEBUG": "INFO"`)).obj()
	d1 := e.driver()
	first := mustPrepare(t, e.ctx, d1, rc)
	_ = d1.Close()
	hasConfigEnv := func(when string) {
		t.Helper()
		if env := specEnv(t, e.specPath(rc.UID))["gpu-0"]; !slices.Contains(env, "NCCL_DEBUG=INFO") {
			t.Errorf("%s: gpu-0 env %q lacks the config's variable", when, env)
		}
	}
	e.setBootID("boot-2")
	if err := os.RemoveAll(e.cdiRoot); err != nil {
		t.Fatal(err)
	}
	d2 := e.driver()
	hasConfigEnv("after a reboot")
	_ = d2.Close()
	if err := os.WriteFile(e.checkpointPath(), []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	d3 := e.driver()
	hasConfigEnv("after the checkpoint was rebuilt")
	entry := e.loadCheckpoint().Claims[rc.UID]
	if entry == nil || !slices.Equal(entry.Devices[0].ConfigEnv, []string{"NCCL_DEBUG=INFO"}) {
		t.Errorf("rebuilt entry = %+v, want the config env", entry)
	}
	again := mustPrepare(t, e.ctx, d3, rc)
	if diff := cmp.Diff(first[rc.UID], again[rc.UID]); diff != "" {
		t.Errorf("prepare after recovery (-before +after):\n%s", diff)
	}
}
