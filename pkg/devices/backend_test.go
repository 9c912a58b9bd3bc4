package devices_test

import (
	"errors"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh100"
	mockserver "github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
	"github.com/google/go-cmp/cmp"

	"github.com/gpufabric/gpufabric/pkg/devices"
)

// TestNVMLBackendFabricFallback checks the V3 -> V1 fallback rule of
// NVMLBackend.GPUFabricInfo on a library without the V symbol (the V call
// itself cannot be mocked, brief §5).
func TestNVMLBackendFabricFallback(t *testing.T) {
	v1 := nvml.GpuFabricInfo{ClusterUuid: [16]uint8{1}, CliqueId: 4, State: nvml.GPU_FABRIC_STATE_COMPLETED}
	tests := map[string]struct {
		symbols  map[string]bool
		want     devices.FabricInfo
		wantRet  nvml.Return
		wantCall bool
	}{
		"v1 only": {
			symbols:  map[string]bool{"nvmlDeviceGetGpuFabricInfo": true},
			want:     devices.FabricInfo{ClusterUUID: [16]uint8{1}, CliqueID: 4, State: nvml.GPU_FABRIC_STATE_COMPLETED, Status: nvml.SUCCESS},
			wantRet:  nvml.SUCCESS,
			wantCall: true,
		},
		"no fabric symbols": {
			symbols: map[string]bool{},
			wantRet: nvml.ERROR_NOT_SUPPORTED,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			server := dgxh100.New()
			server.LookupSymbolFunc = func(s string) error {
				if tc.symbols[s] {
					return nil
				}
				return errors.New("no such symbol")
			}
			dev := server.Devices[0].(*mockserver.Device)
			called := false
			dev.GetGpuFabricInfoFunc = func() (nvml.GpuFabricInfo, nvml.Return) {
				called = true
				return v1, nvml.SUCCESS
			}
			b := devices.NewNVMLBackend(server, devices.NVMLOptions{})
			got, ret := b.GPUFabricInfo(dev)
			if diff := cmp.Diff([]any{tc.want, tc.wantRet, tc.wantCall}, []any{got, ret, called}); diff != "" {
				t.Errorf("[info, ret, v1 called] (-want +got):\n%s", diff)
			}
			if b.SysfsRoot() != "/sys" || b.DevRoot() != "/dev" || b.ProcRoot() != "/proc" {
				t.Errorf("default roots = %q, %q, %q", b.SysfsRoot(), b.DevRoot(), b.ProcRoot())
			}
		})
	}
}
