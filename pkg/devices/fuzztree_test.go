package devices

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/klog/v2/ktesting"

	"github.com/gpufabric/gpufabric/pkg/topology"
)

// hcaFiles are the sysfs files of one HCA that FuzzDiscoverNICs varies.
type hcaFiles struct {
	name string // RDMA device name, the entry in class/infiniband
	// deviceLink is the target of class/infiniband/<name>/device; "" leaves
	// the link out (discovery then falls back to the class entry).
	deviceLink                                      string
	state, physState, linkLayer, rate, guid, pciCls []byte
	numa                                            []byte
}

// healthyHCA is what a ConnectX-7 in IB mode shows.
func healthyHCA(name string) hcaFiles {
	return hcaFiles{
		name: name, deviceLink: "../../../" + "BDF",
		state: []byte("4: ACTIVE\n"), physState: []byte("5: LinkUp\n"), linkLayer: []byte("InfiniBand\n"),
		rate: []byte("400 Gb/sec (4X NDR)\n"), guid: []byte("0c42:a103:0012:3456\n"), pciCls: []byte("0x020700\n"), numa: []byte("0\n"),
	}
}

// outsideMarker is in every file of a decoy PCI device outside the sysfs
// root; no NIC may ever show it.
const outsideMarker = "OUTSIDE"

// writeHCA writes one HCA under root/sys the way the kernel lays it out:
// the PCI device behind a root port, its infiniband/<name> directory with
// ports/1, a device link back, infiniband_verbs/uverbs<n>, and the
// class/infiniband and bus/pci/devices links. It returns false when the
// fuzzed name or link cannot exist on a file system.
func writeHCA(t *testing.T, root, rootComplex, bdf string, verbs int, h hcaFiles) bool {
	t.Helper()
	if h.name == "" || h.name == "." || h.name == ".." || len(h.name) > 200 || strings.ContainsAny(h.name, "/\x00") || strings.ContainsRune(h.deviceLink, 0) {
		return false
	}
	pciRel := filepath.Join("devices", rootComplex, rootComplex[3:]+":01.0", bdf)
	sys := filepath.Join(root, "sys")
	ibdir := filepath.Join(sys, pciRel, "infiniband", h.name)
	port := filepath.Join(ibdir, "ports", "1")
	files := map[string][]byte{
		filepath.Join(port, "state"): h.state, filepath.Join(port, "phys_state"): h.physState,
		filepath.Join(port, "link_layer"): h.linkLayer, filepath.Join(port, "rate"): h.rate,
		filepath.Join(ibdir, "node_guid"): h.guid, filepath.Join(sys, pciRel, "class"): h.pciCls,
		filepath.Join(sys, pciRel, "numa_node"): h.numa,
	}
	for path, content := range files {
		mustWrite(t, path, content)
	}
	mustMkdir(t, filepath.Join(sys, pciRel, "infiniband_verbs", "uverbs"+string(rune('0'+verbs))))
	if h.deviceLink != "" {
		mustSymlink(t, strings.ReplaceAll(h.deviceLink, "BDF", bdf), filepath.Join(ibdir, "device"))
	}
	mustMkdir(t, filepath.Join(sys, "class", "infiniband"))
	mustSymlink(t, filepath.Join("..", "..", pciRel, "infiniband", h.name), filepath.Join(sys, "class", "infiniband", h.name))
	mustMkdir(t, filepath.Join(sys, "bus", "pci", "devices"))
	mustSymlink(t, filepath.Join("..", "..", "..", pciRel), filepath.Join(sys, "bus", "pci", "devices", bdf))
	return true
}

// writeDecoy writes a PCI device outside the sysfs root, reachable only
// through a fuzzed device link that escapes it.
func writeDecoy(t *testing.T, root, bdf string) {
	t.Helper()
	dir := filepath.Join(root, "outside", bdf)
	mustWrite(t, filepath.Join(dir, "class"), []byte("0x0207"+outsideMarker))
	mustWrite(t, filepath.Join(dir, "numa_node"), []byte("7"))
	mustMkdir(t, filepath.Join(dir, "infiniband_verbs", "uverbs"+outsideMarker))
}

func mustWrite(t *testing.T, path string, content []byte) {
	t.Helper()
	mustMkdir(t, filepath.Dir(path))
	if err := os.WriteFile(path, content, 0o644); err != nil {
		t.Fatal(err)
	}
}

func mustMkdir(t *testing.T, dir string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
}

func mustSymlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}

// FuzzDiscoverNICs builds a fake sysfs with two HCAs, A with every file
// (and its name and device link) from the fuzzer and B healthy under a
// fuzzed name, and runs discoverNICs. Oracles: no panic; at most two NICs,
// each with a unique valid device name and rail, bounded rate, a valid or
// no GUID, API-valid attributes and taints, and nothing read from the
// decoy outside the sysfs root; B is published healthy whenever its own
// name is publishable and not taken by A.
func FuzzDiscoverNICs(f *testing.F) {
	h := healthyHCA("mlx5_0")
	f.Add(h.name, "mlx5_1", h.deviceLink, h.state, h.physState, h.linkLayer, h.rate, h.guid, h.pciCls, h.numa)
	f.Add("mlx5_0", "mlx5_1", "../../../../../../../outside/BDF", h.state, h.physState, h.linkLayer, h.rate, h.guid, h.pciCls, h.numa)
	f.Add("ibp19s0", "mlx5_10", "", []byte("1: DOWN\n"), []byte("3: Disabled\n"), []byte("Ethernet\n"), []byte("lots\n"), []byte("zz"), []byte("0x020000\n"), []byte("-1\n"))
	f.Add("mlx5_0", "mlx5-0", h.deviceLink, []byte("ACTIVE-ish"), []byte{}, []byte{}, []byte("2.5 Gb/sec (1X SDR)"), []byte{}, []byte{}, []byte("zero"))
	f.Fuzz(func(t *testing.T, nameA, nameB, link string, state, phys, linkLayer, rate, guid, pciCls, numa []byte) {
		root := t.TempDir()
		a := hcaFiles{name: nameA, deviceLink: link, state: state, physState: phys, linkLayer: linkLayer, rate: rate, guid: guid, pciCls: pciCls, numa: numa}
		if nameA == nameB || !writeHCA(t, root, "pci0000:10", "0000:13:00.0", 0, a) || !writeHCA(t, root, "pci0000:20", "0000:23:00.0", 1, healthyHCA(nameB)) {
			t.Skip("names or link cannot exist on a file system")
		}
		writeDecoy(t, root, "0000:13:00.0")
		_, ctx := ktesting.NewTestContext(t)
		nics, _, err := discoverNICs(ctx, filepath.Join(root, "sys"), filepath.Join(root, "dev"), nil, nil)
		if err != nil {
			t.Fatalf("discoverNICs: %v", err)
		}
		checkNICs(t, nics, filepath.Join(root, "dev"))
		checkHealthyPublished(t, nics, nameA, nameB)
	})
}

// checkNICs asserts what every published NIC must satisfy.
func checkNICs(t *testing.T, nics []NIC, devRoot string) {
	t.Helper()
	if len(nics) > 2 {
		t.Fatalf("got %d NICs from two HCAs", len(nics))
	}
	names, rails := map[string]bool{}, map[int]bool{}
	for _, n := range nics {
		if msgs := validation.IsDNS1123Label(n.Name); len(msgs) > 0 || names[n.Name] {
			t.Fatalf("device name %q is invalid or duplicate: %v", n.Name, msgs)
		}
		if n.Rail < 0 || n.Rail > 1 || rails[n.Rail] {
			t.Fatalf("NIC %s has rail %d (rails so far %v)", n.Name, n.Rail, rails)
		}
		names[n.Name], rails[n.Rail] = true, true
		if n.RateGbps < 0 || n.RateGbps > maxRateGbps || n.NodeGUID != "" && !validGUID(n.NodeGUID) {
			t.Fatalf("NIC %s: rate %d, guid %q", n.Name, n.RateGbps, n.NodeGUID)
		}
		if all := strings.Join(append([]string{n.PCIClass, n.PCI.Path, n.PortState, n.LinkLayer}, n.DeviceNodes...), " "); strings.Contains(all, outsideMarker) {
			t.Fatalf("NIC %s read outside the sysfs root: %q", n.Name, all)
		}
		for _, d := range n.DeviceNodes {
			if !strings.HasPrefix(d, devRoot+"/infiniband/") {
				t.Fatalf("NIC %s: device node %q outside %s", n.Name, d, devRoot)
			}
		}
		if down := n.PortState != portStateActive; down != slices.ContainsFunc(n.Taints, func(tn resourceapi.DeviceTaint) bool { return tn.Key == topology.TaintPortDown }) {
			t.Fatalf("NIC %s: port state %q but taints %v", n.Name, n.PortState, n.Taints)
		}
		checkDeviceAPI(t, nicDevice(n))
	}
}

// checkHealthyPublished asserts that HCA B, healthy, is published as such
// unless its name cannot be published or collides with A's.
func checkHealthyPublished(t *testing.T, nics []NIC, nameA, nameB string) {
	t.Helper()
	name := topology.NICDeviceName(nameB)
	if len(validation.IsDNS1123Label(name)) > 0 || name == topology.NICDeviceName(nameA) {
		return
	}
	i := slices.IndexFunc(nics, func(n NIC) bool { return n.IBDevice == nameB })
	if i < 0 {
		t.Fatalf("healthy HCA %q not published; got %+v", nameB, nics)
	}
	b := nics[i]
	if b.Name != name || b.PortState != portStateActive || b.RateGbps != 400 || b.NodeGUID == "" || len(b.Taints) > 0 || b.LinkLayer != linkLayerIB {
		t.Fatalf("healthy HCA %q published as %+v", nameB, b)
	}
}
