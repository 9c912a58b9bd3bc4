package devices_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/klog/v2/ktesting"

	"github.com/gpufabric/gpufabric/pkg/devices"
	"github.com/gpufabric/gpufabric/pkg/devices/mock"
)

// nicView is what the bad-sysfs cases check about mlx5_0.
type nicView struct {
	Rail     int
	State    string
	RateGbps int
	GUID     string
	HasNUMA  bool
	Nodes    int
	Taint    string
}

// TestBadSysfs breaks the fake sysfs of one healthy HGX H100 node in one
// way per case and checks that discovery degrades as documented instead of
// failing.
func TestBadSysfs(t *testing.T) {
	const port = "class/infiniband/mlx5_0/ports/1/"
	healthy := &nicView{Rail: 0, State: "ACTIVE", RateGbps: 400, GUID: "set", HasNUMA: true, Nodes: 2}
	with := func(f func(v *nicView)) *nicView {
		v := *healthy
		f(&v)
		return &v
	}
	tests := map[string]struct {
		mutate   func(t *testing.T, sys string)
		wantNICs int
		wantNIC  *nicView // mlx5_0; nil when it is not published
		wantRail int      // gpu-0's rail
		wantRoot string   // gpu-0's PCIe root
	}{
		"healthy": {
			mutate:   func(*testing.T, string) {},
			wantNICs: 8, wantNIC: healthy, wantRail: 0, wantRoot: "pci0000:10",
		},
		"no infiniband class": {
			mutate:   func(t *testing.T, sys string) { removeAll(t, sys, "class/infiniband") },
			wantNICs: 0, wantRail: devices.NoRail, wantRoot: "pci0000:10",
		},
		"hca without ports directory": {
			mutate:   func(t *testing.T, sys string) { removeAll(t, sys, "class/infiniband/mlx5_0/ports") },
			wantNICs: 7, wantRail: 1, wantRoot: "pci0000:10",
		},
		"hca with empty ports directory": {
			mutate:   func(t *testing.T, sys string) { removeAll(t, sys, port) },
			wantNICs: 7, wantRail: 1, wantRoot: "pci0000:10",
		},
		"garbage port state": {
			mutate:   func(t *testing.T, sys string) { write(t, sys, port+"state", "ACTIVE-ish\n") },
			wantNICs: 8, wantRail: 0, wantRoot: "pci0000:10",
			wantNIC: with(func(v *nicView) { v.State, v.Taint = "UNKNOWN", "port-1-state-unreadable" }),
		},
		"missing port state": {
			mutate:   func(t *testing.T, sys string) { removeAll(t, sys, port+"state") },
			wantNICs: 8, wantRail: 0, wantRoot: "pci0000:10",
			wantNIC: with(func(v *nicView) { v.State, v.Taint = "UNKNOWN", "port-1-state-unreadable" }),
		},
		"garbage rate": {
			mutate:   func(t *testing.T, sys string) { write(t, sys, port+"rate", "lots\n") },
			wantNICs: 8, wantRail: 0, wantRoot: "pci0000:10",
			wantNIC: with(func(v *nicView) { v.RateGbps = 0 }),
		},
		"missing node guid": {
			mutate:   func(t *testing.T, sys string) { removeAll(t, sys, "class/infiniband/mlx5_0/node_guid") },
			wantNICs: 8, wantRail: 0, wantRoot: "pci0000:10",
			wantNIC: with(func(v *nicView) { v.GUID = "" }),
		},
		"garbage numa node": {
			mutate:   func(t *testing.T, sys string) { write(t, sys, "bus/pci/devices/0000:13:00.0/numa_node", "zero\n") },
			wantNICs: 8, wantRail: 0, wantRoot: "pci0000:10",
			wantNIC: with(func(v *nicView) { v.HasNUMA = false }),
		},
		"missing verbs device": {
			mutate:   func(t *testing.T, sys string) { removeAll(t, sys, "bus/pci/devices/0000:13:00.0/infiniband_verbs") },
			wantNICs: 8, wantRail: 0, wantRoot: "pci0000:10",
			wantNIC: with(func(v *nicView) { v.Nodes = 1 }),
		},
		"device link missing falls back to the class entry": {
			mutate:   func(t *testing.T, sys string) { removeAll(t, sys, "class/infiniband/mlx5_0/device") },
			wantNICs: 8, wantNIC: healthy, wantRail: 0, wantRoot: "pci0000:10",
		},
		"unresolvable hca leaves the others on their GPUs' rails": {
			mutate: func(t *testing.T, sys string) {
				removeAll(t, sys, "class/infiniband/mlx5_0")
				write(t, sys, "class/infiniband/mlx5_0/ports/1/state", "4: ACTIVE\n")
			},
			// gpu-0's own HCA is gone: the nearest left is rail 1's (same NUMA node).
			wantNICs: 7, wantRail: 1, wantRoot: "pci0000:10",
		},
		"gpu missing from bus/pci/devices": {
			mutate:   func(t *testing.T, sys string) { removeAll(t, sys, "bus/pci/devices/0000:14:00.0") },
			wantNICs: 8, wantNIC: healthy, wantRail: devices.NoRail, wantRoot: "",
		},
	}
	fabric, err := mock.LoadFile("mock/fabrics/hgx-h100x8.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, ctx := ktesting.NewTestContext(t)
			b, err := fabric.Backend("h100-n01", t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			tc.mutate(t, b.SysfsRoot())
			inv, err := devices.Discover(ctx, b, "h100-n01")
			if err != nil {
				t.Fatalf("discover failed: %v", err)
			}
			if len(inv.GPUs) != 8 {
				t.Errorf("got %d GPUs, want 8", len(inv.GPUs))
			}
			_, nic := inv.Device("nic-mlx5-0")
			got := []any{len(inv.NICs), viewNIC(nic), inv.GPUs[0].IBRail, inv.GPUs[0].PCI.Root}
			want := []any{tc.wantNICs, tc.wantNIC, tc.wantRail, tc.wantRoot}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("[nics, mlx5_0, gpu-0 rail, gpu-0 root] (-want +got):\n%s", diff)
			}
		})
	}
}

func viewNIC(n *devices.NIC) *nicView {
	if n == nil {
		return nil
	}
	v := &nicView{Rail: n.Rail, State: n.PortState, RateGbps: n.RateGbps, HasNUMA: n.PCI.NUMANode != nil, Nodes: len(n.DeviceNodes)}
	if n.NodeGUID != "" {
		v.GUID = "set"
	}
	if len(n.Taints) > 0 {
		v.Taint = n.Taints[0].Value
	}
	return v
}

func removeAll(t *testing.T, root, rel string) {
	t.Helper()
	p := filepath.Join(root, rel)
	if _, err := os.Lstat(p); err != nil {
		t.Fatalf("fake tree lacks %s: %v", rel, err)
	}
	if err := os.RemoveAll(p); err != nil {
		t.Fatal(err)
	}
}

func write(t *testing.T, root, rel, content string) {
	t.Helper()
	p := filepath.Join(root, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}
