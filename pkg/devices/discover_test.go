package devices_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
	"sigs.k8s.io/yaml"

	"github.com/gpufabric/gpufabric/pkg/devices"
	"github.com/gpufabric/gpufabric/pkg/devices/mock"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// fixtures are the fabric files of pkg/devices/mock/fabrics.
func fixtures(t testing.TB) []string {
	t.Helper()
	files, err := filepath.Glob("mock/fabrics/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no fixture fabrics found: %v", err)
	}
	return files
}

// TestDiscoverGolden runs discovery on every node of every fixture fabric
// and compares (a) a one-line-per-device summary of all nodes and (b) the
// ResourceSlice YAML of representative nodes (the first of each node group
// and every node with a fault) with testdata. Run with -update to rewrite.
func TestDiscoverGolden(t *testing.T) {
	for _, file := range fixtures(t) {
		name := strings.TrimSuffix(filepath.Base(file), ".yaml")
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, ctx := ktesting.NewTestContext(t)
			fabric, err := mock.LoadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			all, err := fabric.DiscoverAll(ctx, t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			var summary strings.Builder
			var slicesYAML strings.Builder
			seenGroup := map[int]bool{}
			for _, nr := range all {
				writeSummary(&summary, nr)
				info, _ := fabric.Node(nr.Node.Name)
				if seenGroup[info.Group] && !strings.Contains(name, "faults") {
					continue
				}
				seenGroup[info.Group] = true
				for _, s := range nr.Slices {
					checkSliceLimits(t, s)
					data, err := yaml.Marshal(s)
					if err != nil {
						t.Fatal(err)
					}
					fmt.Fprintf(&slicesYAML, "---\n%s", data)
				}
			}
			compareGolden(t, filepath.Join("testdata", name+".summary.txt"), summary.String())
			compareGolden(t, filepath.Join("testdata", name+".slices.yaml"), slicesYAML.String())
		})
	}
}

// writeSummary prints one node: its labels, then one line per device with
// what reviewers check (domain, rail, PCI placement, device nodes, taints).
func writeSummary(w *strings.Builder, nr mock.NodeResources) {
	inv := nr.Inventory
	labels := make([]string, 0, len(nr.Node.Labels))
	for k, v := range nr.Node.Labels {
		labels = append(labels, k+"="+v)
	}
	slices.Sort(labels)
	fmt.Fprintf(w, "node %s driver=%s labels=%s\n", inv.NodeName, inv.DriverVersion, strings.Join(labels, ","))
	devRoot := filepath.Dir(filepath.Dir(inv.GPUs[0].DeviceNodes[0]))
	rel := func(paths []string) string {
		return strings.ReplaceAll(strings.Join(paths, ","), devRoot, "")
	}
	for _, g := range inv.GPUs {
		fmt.Fprintf(w, "  %-6s %s %s cc=%s mem=%dMiB mig=%t domain=%s kind=%s links=%d/%d rail=%d %s pci=%s root=%s numa=%s dev=%s%s\n",
			g.Name, g.UUID, g.ProductName, g.CUDAComputeCapability, g.MemoryBytes>>20, g.MIGEnabled, g.NVLink.Domain, g.NVLink.Kind,
			g.NVLink.ActiveLinks, g.NVLink.TotalLinks, g.IBRail, g.IBDevice, g.PCI.BusID, g.PCI.Root, numa(g.PCI.NUMANode), rel(g.DeviceNodes[:1]), taints(g.Taints))
		for _, p := range g.MIG {
			fmt.Fprintf(w, "    %s %s slices=%d+%d mem=%dMiB sm=%d\n", p.Name, p.Profile, p.Start, p.Size, p.MemoryBytes>>20, p.Multiprocessors)
		}
	}
	for _, n := range inv.NICs {
		fmt.Fprintf(w, "  %-10s rail=%d %s %dG %s/%s guid=%s class=%s pci=%s root=%s numa=%s dev=%s%s\n",
			n.Name, n.Rail, n.LinkLayer, n.RateGbps, n.PortState, n.PhysState, n.NodeGUID, n.PCIClass, n.PCI.BusID, n.PCI.Root, numa(n.PCI.NUMANode), rel(n.DeviceNodes), taints(n.Taints))
	}
}

func numa(n *int) string {
	if n == nil {
		return "-"
	}
	return fmt.Sprint(*n)
}

func taints(ts []resourceapi.DeviceTaint) string {
	var s []string
	for _, t := range ts {
		s = append(s, fmt.Sprintf("%s=%s:%s", t.Key, t.Value, t.Effect))
	}
	if len(s) == 0 {
		return ""
	}
	return " taints=" + strings.Join(s, ",")
}

// checkSliceLimits asserts the API limits the golden files rely on.
func checkSliceLimits(t *testing.T, s resourceapi.ResourceSlice) {
	t.Helper()
	limit := resourceapi.ResourceSliceMaxDevices
	if len(s.Spec.SharedCounters) > 0 && (len(s.Spec.Devices) > 0 || len(s.Spec.SharedCounters) > resourceapi.ResourceSliceMaxCounterSets) {
		t.Errorf("%s: %d counter sets with %d devices", s.Name, len(s.Spec.SharedCounters), len(s.Spec.Devices))
	}
	for _, d := range s.Spec.Devices {
		if len(d.Taints) > 0 || len(d.ConsumesCounters) > 0 {
			limit = resourceapi.ResourceSliceMaxDevicesWithAdvancedFeatures
		}
		if n := len(d.Attributes) + len(d.Capacity); n > resourceapi.ResourceSliceMaxAttributesAndCapacitiesPerDevice {
			t.Errorf("%s/%s: %d attributes and capacities", s.Name, d.Name, n)
		}
		for name, a := range d.Attributes {
			if a.StringValue != nil && len(*a.StringValue) > resourceapi.DeviceAttributeMaxValueLength {
				t.Errorf("%s/%s: attribute %s too long", s.Name, d.Name, name)
			}
		}
	}
	if len(s.Spec.Devices) > limit {
		t.Errorf("%s: %d devices, limit %d", s.Name, len(s.Spec.Devices), limit)
	}
}

func compareGolden(t *testing.T, path, got string) {
	t.Helper()
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read golden file (run with -update to create it): %v", err)
	}
	if diff := cmp.Diff(string(want), got); diff != "" {
		t.Errorf("%s differs (-want +got; run with -update to accept):\n%s", path, diff)
	}
}

// BenchmarkDiscoverNode measures Discover plus DriverResources on the
// first node of each fixture (the fake tree is built once, outside the
// timed loop).
func BenchmarkDiscoverNode(b *testing.B) {
	for _, file := range fixtures(b) {
		name := strings.TrimSuffix(filepath.Base(file), ".yaml")
		b.Run(name, func(b *testing.B) {
			ctx := klog.NewContext(context.Background(), logr.Discard())
			fabric, err := mock.LoadFile(file)
			if err != nil {
				b.Fatal(err)
			}
			node := fabric.Nodes()[0].Name
			backend, err := fabric.Backend(node, b.TempDir())
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				inv, err := devices.Discover(ctx, backend, node)
				if err != nil {
					b.Fatal(err)
				}
				_ = inv.DriverResources()
			}
		})
	}
}

// TestDiscoverStopsWhenCancelled checks that discovery returns the
// context's error at once when it is already done (SIGTERM during
// discovery).
func TestDiscoverStopsWhenCancelled(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	fabric, err := mock.LoadFile("mock/fabrics/hgx-h100x8.yaml")
	if err != nil {
		t.Fatal(err)
	}
	b, err := fabric.Backend("h100-n01", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(ctx)
	cancel()
	inv, err := devices.Discover(ctx, b, "h100-n01")
	if !errors.Is(err, context.Canceled) || inv != nil {
		t.Errorf("Discover = %v, %v; want no inventory and context.Canceled", inv, err)
	}
}
