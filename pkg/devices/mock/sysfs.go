package mock

import (
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/gpufabric/gpufabric/pkg/devices"
	"github.com/gpufabric/gpufabric/pkg/topology"
)

// pciDevice is one endpoint in the fake PCI tree.
type pciDevice struct {
	busID string
	// chain is the sysfs path below devices/: root complex, root port,
	// switch upstream port, switch downstream port, the device.
	chain []string
	numa  int
}

func (d pciDevice) path() string { return "devices/" + strings.Join(d.chain, "/") }

// layout is where a node's GPUs and HCAs sit on the PCI tree.
type layout struct {
	gpus, hcas []pciDevice
}

func bdf(bus, dev int) string { return fmt.Sprintf("0000:%02x:%02x.0", bus, dev) }

// layout builds the node's PCI tree. Rule: one PCIe switch per HCA, each
// under its own root complex; the HCA of rail r is the first device on
// switch r and GPU g sits on switch gpuRails[g]. Without HCAs every GPU has
// its own switch. Bus numbers grow with the switch, so the rail order by
// PCI address is the rail number. Switches are spread evenly over the NUMA
// nodes.
func (n *node) layout() layout {
	switches := n.hcaCount
	if switches == 0 {
		switches = n.gpuCount
	}
	members := make([][]string, switches) // "hca" or "gpu<g>"
	for s := range n.hcaCount {
		members[s] = append(members[s], "hca")
	}
	for g := range n.gpuCount {
		s := g
		if n.hcaCount > 0 {
			s = n.gpuRails[g]
		}
		members[s] = append(members[s], fmt.Sprintf("gpu%d", g))
	}
	var lay layout
	lay.gpus = make([]pciDevice, n.gpuCount)
	bus := 0x10
	for s := range switches {
		root := fmt.Sprintf("pci0000:%02x", bus)
		chain := []string{root, bdf(bus, 1), bdf(bus+1, 0)}
		next := bus + 3
		for k, m := range members[s] {
			d := pciDevice{busID: bdf(next, 0), numa: s * n.numaNodes / switches}
			d.chain = append(slices.Clone(chain), bdf(bus+2, k), d.busID)
			next++
			if m == "hca" {
				lay.hcas = append(lay.hcas, d)
			} else {
				var g int
				fmt.Sscanf(m, "gpu%d", &g)
				lay.gpus[g] = d
			}
		}
		bus = (next + 8) &^ 7
	}
	return lay
}

// treeWriter writes files under a root and remembers the first error. It
// skips paths it already wrote (bridges are shared by several devices) and
// directories it already made: syscalls dominate the cost of a fake tree.
type treeWriter struct {
	root string
	done map[string]bool
	err  error
}

func (w *treeWriter) fail(err error) {
	if w.err == nil && err != nil {
		w.err = fmt.Errorf("create fake tree: %w", err)
	}
}

// once reports whether rel is new, and marks it done.
func (w *treeWriter) once(rel string) bool {
	if w.done == nil {
		w.done = map[string]bool{}
	}
	if w.err != nil || w.done[rel] {
		return false
	}
	w.done[rel] = true
	return true
}

func (w *treeWriter) file(rel, content string) {
	if !w.once(rel) {
		return
	}
	w.dir(filepath.Dir(rel))
	if w.err == nil {
		w.fail(os.WriteFile(filepath.Join(w.root, rel), []byte(content), 0o644))
	}
}

func (w *treeWriter) dir(rel string) {
	if !w.once(rel + "/") {
		return
	}
	w.fail(os.MkdirAll(filepath.Join(w.root, rel), 0o755))
}

// link creates rel as a symlink to target, relative to rel's directory.
func (w *treeWriter) link(rel, target string) {
	if !w.once(rel) {
		return
	}
	w.dir(filepath.Dir(rel))
	relTarget, err := filepath.Rel(filepath.Dir(filepath.Join(w.root, rel)), filepath.Join(w.root, target))
	if err == nil {
		err = os.Symlink(relTarget, filepath.Join(w.root, rel))
	}
	w.fail(err)
}

// writeSysfs writes the node's fake sysfs tree under root (the directory
// that stands for /sys).
func (n *node) writeSysfs(root string, lay layout) error {
	w := &treeWriter{root: root}
	for _, g := range lay.gpus {
		w.pciDevice(g, "0x030200", "0x10de", g.numa)
	}
	missing := 0
	for r, h := range lay.hcas {
		breaks := n.faults.sysfs[r]
		if slices.Contains(breaks, BreakMissing) {
			// Not enumerated: the kernel names the later HCAs one lower.
			missing++
			continue
		}
		numa := h.numa
		if slices.Contains(breaks, BreakNoNUMA) {
			numa = -2 // no file
		}
		class := "0x020700"
		if n.linkLayer == "Ethernet" {
			class = "0x020000"
		}
		w.pciDevice(h, class, "0x15b3", numa)
		n.writeHCA(w, r, r-missing, h, breaks)
	}
	return w.err
}

// pciDevice writes a device, the bridges above it and the
// bus/pci/devices links. numa -2 leaves numa_node out.
func (w *treeWriter) pciDevice(d pciDevice, class, vendor string, numa int) {
	for i := 1; i < len(d.chain); i++ {
		rel := "devices/" + strings.Join(d.chain[:i+1], "/")
		if i < len(d.chain)-1 {
			w.file(rel+"/class", "0x060400\n")
		}
		w.link("bus/pci/devices/"+d.chain[i], rel)
	}
	w.file(d.path()+"/class", class+"\n")
	w.file(d.path()+"/vendor", vendor+"\n")
	if numa != -2 {
		w.file(d.path()+"/numa_node", fmt.Sprintf("%d\n", numa))
	}
}

// writeHCA writes the HCA of rail as the kernel's RDMA device number ib.
func (n *node) writeHCA(w *treeWriter, rail, ib int, h pciDevice, breaks []string) {
	ibdev := fmt.Sprintf("mlx5_%d", ib)
	dir := h.path() + "/infiniband/" + ibdev
	w.dir(dir)
	w.link("class/infiniband/"+ibdev, dir)
	if !slices.Contains(breaks, BreakNoDeviceLink) {
		w.link(dir+"/device", h.path())
	}
	guid := fmt.Sprintf("%x", sha256.Sum256([]byte(n.name+"/"+ibdev)))
	guid = guid[0:4] + ":" + guid[4:8] + ":" + guid[8:12] + ":" + guid[12:16]
	if slices.Contains(breaks, BreakGarbageGUID) {
		guid = "not-a-guid"
	}
	w.file(dir+"/node_guid", guid+"\n")
	if !slices.Contains(breaks, BreakNoVerbs) {
		w.file(fmt.Sprintf("%s/infiniband_verbs/uverbs%d/ibdev", h.path(), ib), ibdev+"\n")
	}
	if slices.Contains(breaks, BreakNoPort) {
		return
	}
	state, phys := "ACTIVE", "LinkUp"
	if p, down := n.faults.portDown[rail]; down {
		state, phys = p.State, p.PhysState
	}
	port := dir + "/ports/1/"
	stateLine := fmt.Sprintf("%d: %s\n", portStateNumbers()[state], state)
	if slices.Contains(breaks, BreakGarbageState) {
		stateLine = "banana\n"
	}
	w.file(port+"state", stateLine)
	// The port GUID differs from the node GUID (one node, several ports).
	pg := fmt.Sprintf("%x", sha256.Sum256([]byte(n.name+"/"+h.busID+"/port1")))
	w.file(port+"gids/0", "fe80:0000:0000:0000:"+pg[0:4]+":"+pg[4:8]+":"+pg[8:12]+":"+pg[12:16]+"\n")
	w.file(port+"phys_state", fmt.Sprintf("%d: %s\n", physStateNumbers()[phys], phys))
	w.file(port+"link_layer", n.linkLayer+"\n")
	writeIBCounters(n, w, rail, port)
	switch {
	case slices.Contains(breaks, BreakNoRate):
	case slices.Contains(breaks, BreakGarbageRate):
		w.file(port+"rate", "fast\n")
	default:
		w.file(port+"rate", rateString(n.rateGbps)+"\n")
	}
}

// rateString is what sysfs prints for a 4X port of the given speed.
func rateString(gbps int) string {
	names := map[int]string{100: "EDR", 200: "HDR", 400: "NDR", 800: "XDR"}
	if name, ok := names[gbps]; ok {
		return fmt.Sprintf("%d Gb/sec (4X %s)", gbps, name)
	}
	return fmt.Sprintf("%d Gb/sec (4X)", gbps)
}

// writeDev writes the node's device nodes as regular files under root
// (the directory that stands for /dev).
func (n *node) writeDev(root string) error {
	w := &treeWriter{root: root}
	for g := range n.gpuCount {
		w.file(fmt.Sprintf("nvidia%d", g), "")
	}
	for _, f := range []string{"nvidiactl", "nvidia-uvm", "nvidia-uvm-tools"} {
		w.file(f, "")
	}
	if n.hcaCount > 0 {
		w.file("infiniband/rdma_cm", "")
	}
	ib := 0
	for r := range n.hcaCount {
		if !slices.Contains(n.faults.sysfs[r], BreakMissing) {
			w.file(fmt.Sprintf("infiniband/uverbs%d", ib), "")
			ib++
		}
	}
	return w.err
}

// writeProc writes the node's fake procfs: devices (with the IMEX major
// when the driver supports IMEX), driver/nvidia/params and the IMEX daemon's
// status.
func (n *node) writeProc(root string) error {
	w := &treeWriter{root: root}
	imex := n.model.fabricCapable() && !n.faults.imex.noDriverSupport
	var dev strings.Builder
	dev.WriteString("Character devices:\n  1 mem\n  4 /dev/vc/0\n195 nvidia-frontend\n")
	if imex {
		fmt.Fprintf(&dev, "%d %s\n", IMEXMajor, devices.IMEXDeviceName)
	}
	dev.WriteString("508 nvidia-uvm\n510 nvidia-caps\n\nBlock devices:\n  7 loop\n259 blkext\n")
	w.file("devices", dev.String())
	channels := devices.DefaultIMEXChannels
	if n.faults.imex.channels > 0 {
		channels = n.faults.imex.channels
	}
	w.file("driver/nvidia-caps/mig-minors", migMinors(n.gpuCount))
	w.file("driver/nvidia/params", fmt.Sprintf("ResmanDebugLevel: 4294967295\nImexChannelCount: %d\nCreateImexChannel0: 0\n", channels))
	switch {
	case n.kind != topology.DomainKindMNNVL || n.faults.imex.daemon == IMEXDaemonDown:
	case n.faults.imex.daemon == IMEXDaemonNotReady:
		w.file(imexStatusFile, "NOT_READY\n")
	default:
		w.file(imexStatusFile, devices.IMEXReady+"\n")
	}
	return w.err
}
