package mock_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"k8s.io/klog/v2/ktesting"

	"github.com/gpufabric/gpufabric/pkg/devices"
	"github.com/gpufabric/gpufabric/pkg/devices/fabrichealth"
	"github.com/gpufabric/gpufabric/pkg/devices/mock"
)

// counterFaults raise counters of n01: set then add fold in file order,
// adds saturate, and n02 keeps zeros.
const counterFaults = `faults:
- node: n01
  nvlinkErrors: {gpu: 1, link: 3, counter: replay, set: 10}
- node: n01
  nvlinkErrors: {gpu: 1, link: 3, counter: replay, add: 5}
- node: n01
  nvlinkErrors: {gpu: 0, link: 17, counter: crcData, add: 2}
- node: n01
  ibCounters: {rail: 2, counter: symbol_error, add: 40}
- node: n01
  ibCounters: {rail: 2, counter: symbol_error, add: 18446744073709551615}
- node: n01
  ibCounters: {rail: 0, counter: link_downed, set: 3}
`

func readAll(ctx context.Context, t *testing.T, f *mock.Fabric, node string) map[string]uint64 {
	t.Helper()
	b, err := f.Backend(node, filepath.Join(t.TempDir(), node))
	if err != nil {
		t.Fatal(err)
	}
	inv, err := devices.Discover(ctx, b, node)
	if err != nil {
		t.Fatal(err)
	}
	var gpus []fabrichealth.GPU
	for _, g := range inv.GPUs {
		gpus = append(gpus, fabrichealth.GPU{Name: g.Name, Index: g.Index, UUID: g.UUID})
	}
	var ports []fabrichealth.Port
	for _, n := range inv.NICs {
		ports = append(ports, fabrichealth.Port{Name: n.Name, IBDevice: n.IBDevice, Port: n.Port})
	}
	out := map[string]uint64{}
	rs := append(fabrichealth.ReadNVLinks(ctx, b.NVML(), gpus), fabrichealth.ReadIBPorts(ctx, b.SysfsRoot(), ports)...)
	for _, r := range rs {
		out[fmt.Sprintf("%s/%s/%d", r.Device, r.Counter, r.Link)] += r.Value
		out["count"]++
	}
	return out
}

func TestCounterFaults(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f, err := mock.Parse("counters.yaml", []byte(goodGroup+counterFaults))
	if err != nil {
		t.Fatal(err)
	}
	got := readAll(ctx, t, f, "n01")
	for key, want := range map[string]uint64{
		"gpu-1/nvlink_replay/3":        15,
		"gpu-0/nvlink_crc_data/17":     2,
		"gpu-0/nvlink_replay/0":        0,
		"nic-mlx5-2/symbol_error/1":    18446744073709551615,
		"nic-mlx5-0/link_downed/1":     3,
		"nic-mlx5-1/port_rcv_errors/1": 0,
		// 4 GPUs × 18 links × 4 counters + 4 HCAs × 4 counters.
		"count": 4*18*4 + 4*4,
	} {
		if got[key] != want {
			t.Errorf("%s = %d, want %d", key, got[key], want)
		}
	}
	if other := readAll(ctx, t, f, "n02"); other["gpu-1/nvlink_replay/3"] != 0 || other["nic-mlx5-2/symbol_error/1"] != 0 {
		t.Errorf("n02 has n01's counters: %v", other)
	}
}

// TestCounterFaultsNoNVLink: a node without NVLink reports no NVLink
// counters (NOT_SUPPORTED), only its ports'.
func TestCounterFaultsNoNVLink(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f, err := mock.Parse("pcie.yaml", []byte("nodeGroups:\n- name: p\n  gpus: {model: A100-PCIE, count: 2}\n  nvlink: {kind: none}\n  hcas: {count: 1}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got := readAll(ctx, t, f, "p"); got["count"] != 4 {
		t.Errorf("%d readings, want the HCA's 4: %v", got["count"], got)
	}
}

// TestEventSetFailures: the first createFailures EventSetCreate calls of a
// backend fail, the next one works.
func TestEventSetFailures(t *testing.T) {
	f, err := mock.Parse("events.yaml", []byte(goodGroup+"faults:\n- node: n01\n  eventSet: {createFailures: 2}\n"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	b, err := f.Backend("n01", filepath.Join(dir, "n01"))
	if err != nil {
		t.Fatal(err)
	}
	var rets []nvml.Return
	for range 3 {
		_, ret := b.NVML().EventSetCreate()
		rets = append(rets, ret)
	}
	if rets[0] != nvml.ERROR_UNKNOWN || rets[1] != nvml.ERROR_UNKNOWN || rets[2] != nvml.SUCCESS {
		t.Errorf("EventSetCreate returned %v, want two failures then success", rets)
	}
}
