package mock_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/klog/v2/ktesting"

	"github.com/gpufabric/gpufabric/pkg/devices"
	"github.com/gpufabric/gpufabric/pkg/devices/mock"
	"github.com/gpufabric/gpufabric/pkg/topology"
)

// FuzzParse feeds Parse any fabric file, seeded with the fixtures. Oracles:
// no panic and no unbounded work; an error starts with the file name and,
// past YAML decoding, names a node group, a node or a fault; a fabric that
// loads has 1..MaxNodes uniquely named nodes within the per-node bounds,
// and its first node builds into a backend that discovery reads without
// error and without more GPUs or NICs than the file gave it.
func FuzzParse(f *testing.F) {
	files, err := filepath.Glob(filepath.Join("fabrics", "*.yaml"))
	if err != nil || len(files) == 0 {
		f.Fatalf("no fixtures: %v", err)
	}
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte(goodGroup))
	f.Add([]byte(goodGroup + "faults:\n- node: n01\n  portDown: {rail: 0}\n  sysfs: {rail: 1, break: garbage-rate}\n"))
	f.Add([]byte(goodGroup + "faults:\n- node: n01\n  nvlinkErrors: {gpu: 1, link: 3, counter: crcFlit, set: 7}\n- node: n01\n  ibCounters: {rail: 2, counter: symbol_error, add: 18446744073709551615}\n- node: n01\n  eventSet: {createFailures: 2}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		const name = "fuzz.yaml"
		fabric, err := mock.Parse(name, data)
		if err != nil {
			checkParseError(t, name, err)
			return
		}
		nodes := checkNodes(t, fabric)
		_, ctx := ktesting.NewTestContext(t)
		first := nodes[0]
		b, err := fabric.Backend(first.Name, t.TempDir())
		if err != nil {
			t.Fatalf("a fabric that loads cannot build node %s: %v", first.Name, err)
		}
		inv, err := devices.Discover(ctx, b, first.Name)
		if err != nil {
			t.Fatalf("discovery fails on node %s of a fabric that loads: %v", first.Name, err)
		}
		if len(inv.GPUs) > first.GPUs || len(inv.NICs) > first.HCAs {
			t.Fatalf("node %s: discovered %d GPUs and %d NICs, the file gives %d and %d", first.Name, len(inv.GPUs), len(inv.NICs), first.GPUs, first.HCAs)
		}
	})
}

func checkParseError(t *testing.T, name string, err error) {
	t.Helper()
	msg := err.Error()
	if !strings.HasPrefix(msg, name+": ") {
		t.Fatalf("error does not start with the file name: %q", msg)
	}
	rest := strings.TrimPrefix(msg, name+": ")
	for _, decodeErr := range []string{"parse yaml: ", "decode: ", "unknown field ", "duplicate field ", "file is "} {
		if strings.HasPrefix(rest, decodeErr) {
			return
		}
	}
	for _, where := range []string{"nodeGroups", "faults[", "node "} {
		if strings.HasPrefix(rest, where) {
			return
		}
	}
	t.Fatalf("error names no node group, node or fault: %q", msg)
}

// checkNodes asserts the bounds of a loaded fabric and returns its nodes.
func checkNodes(t *testing.T, fabric *mock.Fabric) []mock.NodeInfo {
	t.Helper()
	nodes := fabric.Nodes()
	if len(nodes) < 1 || len(nodes) > mock.MaxNodes {
		t.Fatalf("fabric has %d nodes, want 1..%d", len(nodes), mock.MaxNodes)
	}
	seen := map[string]bool{}
	for _, n := range nodes {
		if seen[n.Name] || len(validation.IsDNS1123Subdomain(n.Name)) > 0 {
			t.Fatalf("node name %q is a duplicate or not a DNS subdomain", n.Name)
		}
		seen[n.Name] = true
		if n.GPUs < 1 || n.GPUs > mock.MaxGPUsPerNode || n.HCAs < 0 || n.HCAs > mock.MaxHCAsPerNode {
			t.Fatalf("node %s has %d GPUs and %d HCAs", n.Name, n.GPUs, n.HCAs)
		}
		switch n.NVLinkKind {
		case topology.DomainKindMNNVL, topology.DomainKindNVSwitch, topology.DomainKindNone:
		default:
			t.Fatalf("node %s has nvlink kind %q", n.Name, n.NVLinkKind)
		}
		if n.Labels["kubernetes.io/hostname"] != n.Name {
			t.Fatalf("node %s has labels %v", n.Name, n.Labels)
		}
		if again, ok := fabric.Node(n.Name); !ok || again.Name != n.Name || again.Group != n.Group {
			t.Fatalf("Node(%q) = %+v, %t", n.Name, again, ok)
		}
	}
	return nodes
}
