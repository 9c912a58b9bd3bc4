package devices_test

import (
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/klog/v2/ktesting"

	"github.com/gpufabric/gpufabric/pkg/devices"
	"github.com/gpufabric/gpufabric/pkg/devices/mock"
	"github.com/gpufabric/gpufabric/pkg/topology"
)

// TestNVMLErrorOnOneGPU breaks one NVML call of GPU 1 of a GB200 node and
// checks the rule: the GPU is skipped when it cannot be named, tainted with
// TaintNVMLError otherwise, and the other GPUs are untouched.
func TestNVMLErrorOnOneGPU(t *testing.T) {
	type result struct {
		GPUs    []string
		Taint   string // gpu-1's nvml-error taint value
		Healthy int    // GPUs without taints
	}
	all := []string{"gpu-0", "gpu-1", "gpu-2", "gpu-3"}
	skipped := []string{"gpu-0", "gpu-2", "gpu-3"}
	tests := map[string]result{
		mock.CallGetHandle:                {GPUs: skipped, Healthy: 3},
		mock.CallGetUUID:                  {GPUs: skipped, Healthy: 3},
		mock.CallGetMinorNumber:           {GPUs: skipped, Healthy: 3},
		mock.CallGetName:                  {GPUs: all, Taint: "GetName-ERROR_GPU_IS_LOST", Healthy: 3},
		mock.CallGetMemoryInfo:            {GPUs: all, Taint: "GetMemoryInfo-ERROR_GPU_IS_LOST", Healthy: 3},
		mock.CallGetPciInfo:               {GPUs: all, Taint: "GetPciInfo-ERROR_GPU_IS_LOST", Healthy: 3},
		mock.CallGetArchitecture:          {GPUs: all, Taint: "GetArchitecture-ERROR_GPU_IS_LOST", Healthy: 3},
		mock.CallGetCudaComputeCapability: {GPUs: all, Taint: "GetCudaComputeCapability-ERROR_GPU_IS_LOST", Healthy: 3},
		mock.CallGetMigMode:               {GPUs: all, Taint: "GetMigMode-ERROR_GPU_IS_LOST", Healthy: 3},
		mock.CallGetNvLinkState:           {GPUs: all, Taint: "GetNvLinkState-ERROR_GPU_IS_LOST", Healthy: 3},
		mock.CallGetGpuFabricInfo:         {GPUs: all, Taint: "GetGpuFabricInfo-ERROR_GPU_IS_LOST", Healthy: 3},
	}
	for call, want := range tests {
		t.Run(call, func(t *testing.T) {
			t.Parallel()
			_, ctx := ktesting.NewTestContext(t)
			fabric, err := mock.Parse("t.yaml", []byte(fmt.Sprintf(`
nodeGroups:
- name: n1
  gpus: {model: GB200}
  nvlink: {kind: mnnvl, clusterUUID: 5e0a7b3c-1d2f-4a6b-8c9d-e0f1a2b3c4d5, cliqueID: 1}
  hcas: {count: 4}
faults:
- node: n1
  nvmlError: {gpu: 1, call: %s, error: ERROR_GPU_IS_LOST}
`, call)))
			if err != nil {
				t.Fatal(err)
			}
			b, err := fabric.Backend("n1", t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			inv, err := devices.Discover(ctx, b, "n1")
			if err != nil {
				t.Fatalf("one GPU's NVML error failed the node: %v", err)
			}
			var got result
			for _, g := range inv.GPUs {
				got.GPUs = append(got.GPUs, g.Name)
				if len(g.Taints) == 0 {
					got.Healthy++
				}
				for _, taint := range g.Taints {
					if taint.Key == topology.TaintNVMLError && g.Name == "gpu-1" {
						got.Taint = taint.Value
					}
				}
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
			_ = inv.DriverResources()
		})
	}
}
