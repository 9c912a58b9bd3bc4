package mock

import (
	"slices"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxb200"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh200"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/gpus"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
)

// gpuModel is one GPU model a fabric file may name.
type gpuModel struct {
	config gpus.Config
	// newServer is the go-nvml mock server constructor of the matching DGX.
	newServer func(...gpus.Config) *server.Server
	// defaultCount is GPUs per node when the file does not say.
	defaultCount int
	// nvlinks is NVLinks per GPU; 0 for PCIe cards without NVLink.
	nvlinks int
	// allocatable is the node's default CPU and memory.
	cpu, memory string
}

// fabricCapable reports whether the model registers with an NVLink fabric
// (Hopper and later): earlier GPUs answer ERROR_NOT_SUPPORTED.
func (m gpuModel) fabricCapable() bool {
	return m.config.Architecture >= nvml.DEVICE_ARCH_HOPPER && m.nvlinks > 0
}

// gb200 is a Blackwell GB200 superchip GPU, derived from the B200 mock.
func gb200() gpus.Config {
	c := gpus.B200_SXM5_180GB
	c.Name = "NVIDIA GB200"
	c.MemoryMB = 189471
	c.PciDeviceId = 0x294110DE
	return c
}

func a100SXM40() gpus.Config {
	c := gpus.A100_SXM4_40GB
	c.Name = strings.TrimPrefix(c.Name, "Mock ")
	return c
}

// gpuModels maps the model names of the fabric file to their mocks. It is
// a constant table built once per call; nothing mutates it.
func gpuModels() map[string]gpuModel {
	return map[string]gpuModel{
		"A100":      {config: gpus.A100_SXM4_80GB, newServer: dgxa100.NewWithGPUs, defaultCount: 8, nvlinks: 12, cpu: "256", memory: "2Ti"},
		"A100-40GB": {config: a100SXM40(), newServer: dgxa100.NewWithGPUs, defaultCount: 8, nvlinks: 12, cpu: "256", memory: "1Ti"},
		"A100-PCIE": {config: gpus.A100_PCIE_80GB, newServer: dgxa100.NewWithGPUs, defaultCount: 4, nvlinks: 0, cpu: "128", memory: "512Gi"},
		"H100":      {config: gpus.H100_SXM5_80GB, newServer: dgxh100.NewWithGPUs, defaultCount: 8, nvlinks: 18, cpu: "224", memory: "2Ti"},
		"H200":      {config: gpus.H200_SXM5_141GB, newServer: dgxh200.NewWithGPUs, defaultCount: 8, nvlinks: 18, cpu: "224", memory: "2Ti"},
		"B200":      {config: gpus.B200_SXM5_180GB, newServer: dgxb200.NewWithGPUs, defaultCount: 8, nvlinks: 18, cpu: "224", memory: "4Ti"},
		"GB200":     {config: gb200(), newServer: dgxb200.NewWithGPUs, defaultCount: 4, nvlinks: 18, cpu: "144", memory: "960Gi"},
	}
}

func modelNames() string {
	names := make([]string, 0, 8)
	for n := range gpuModels() {
		names = append(names, n)
	}
	slices.Sort(names)
	return strings.Join(names, ", ")
}

// nvmlErrors are the NVML errors a fault may inject, by name.
func nvmlErrors() map[string]nvml.Return {
	return map[string]nvml.Return{
		"ERROR_UNKNOWN":       nvml.ERROR_UNKNOWN,
		"ERROR_GPU_IS_LOST":   nvml.ERROR_GPU_IS_LOST,
		"ERROR_NOT_SUPPORTED": nvml.ERROR_NOT_SUPPORTED,
		"ERROR_NO_PERMISSION": nvml.ERROR_NO_PERMISSION,
	}
}

// Calls an nvmlError fault can break.
const (
	CallGetHandle                = "DeviceGetHandleByIndex"
	CallGetUUID                  = "GetUUID"
	CallGetMinorNumber           = "GetMinorNumber"
	CallGetName                  = "GetName"
	CallGetMemoryInfo            = "GetMemoryInfo"
	CallGetPciInfo               = "GetPciInfo"
	CallGetArchitecture          = "GetArchitecture"
	CallGetCudaComputeCapability = "GetCudaComputeCapability"
	CallGetMigMode               = "GetMigMode"
	CallGetNvLinkState           = "GetNvLinkState"
	CallGetGpuFabricInfo         = "GetGpuFabricInfo"
)

func knownCalls() []string {
	return []string{CallGetHandle, CallGetUUID, CallGetMinorNumber, CallGetName, CallGetMemoryInfo,
		CallGetPciInfo, CallGetArchitecture, CallGetCudaComputeCapability, CallGetMigMode,
		CallGetNvLinkState, CallGetGpuFabricInfo}
}
