package devices

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"k8s.io/klog/v2"

	"github.com/gpufabric/gpufabric/pkg/topology"
)

// Port states as sysfs names them.
const (
	portStateActive  = "ACTIVE"
	portStateUnknown = "UNKNOWN"
	linkLayerIB      = "InfiniBand"
)

// discoverNICs reads every RDMA device under <sysfsRoot>/class/infiniband.
// go-nvlib's nvpci misses IB-mode HCAs (class 0x0207xx), so this reads sysfs
// directly and does not filter on the PCI class.
//
// Rules: a node without /sys/class/infiniband has no NICs. An HCA whose PCI
// device cannot be resolved or that has no port is skipped (logged). The
// lowest-numbered port is published; a port that is not ACTIVE, or whose
// state cannot be read, taints the NIC with TaintPortDown. An HCA without
// ports still counts when rails are numbered, so its rail is not given to
// the next HCA; one whose PCI device is unknown (see hcaPCIDir) cannot be
// ordered and does not count, which shifts the rails after it (logged). Unreadable rate,
// link layer or node GUID leave those attributes out. Rails are numbered by
// numberRails. The result is sorted by IB device name.
func discoverNICs(ctx context.Context, sysfsRoot, devRoot string) []NIC {
	logger := klog.FromContext(ctx)
	entries, err := os.ReadDir(filepath.Join(sysfsRoot, "class", "infiniband"))
	if errors.Is(err, fs.ErrNotExist) {
		logger.V(2).Info("No RDMA devices: class/infiniband does not exist", "sysfsRoot", sysfsRoot)
		return nil
	}
	if err != nil {
		logger.Error(err, "Listing RDMA devices failed; publishing no NICs")
		return nil
	}
	var nics []NIC
	var unusable []error
	for _, e := range entries {
		nicLogger := logger.WithValues("ibDevice", e.Name())
		nic, err := readNIC(klog.NewContext(ctx, nicLogger), sysfsRoot, devRoot, e.Name())
		if err != nil && nic.IBDevice == "" {
			nicLogger.Error(err, "Skipping HCA; it does not count as a rail")
			continue
		}
		nics = append(nics, nic)
		unusable = append(unusable, err)
	}
	numberRails(nics)
	usable := nics[:0]
	for i, nic := range nics {
		if unusable[i] != nil {
			logger.Error(unusable[i], "Skipping HCA; its rail stays reserved", "ibDevice", nic.IBDevice, "rail", nic.Rail)
			continue
		}
		usable = append(usable, nic)
	}
	nics = usable
	slices.SortFunc(nics, func(a, b NIC) int { return compareIBDevice(a.IBDevice, b.IBDevice) })
	return nics
}

// readNIC reads one HCA. It returns an empty NIC and an error when the
// HCA's PCI device is unknown, and the NIC read so far and an error when it
// has no port.
func readNIC(ctx context.Context, sysfsRoot, devRoot, ibdev string) (NIC, error) {
	logger := klog.FromContext(ctx)
	dir := filepath.Join(sysfsRoot, "class", "infiniband", ibdev)
	pciDir, err := hcaPCIDir(dir)
	if err != nil {
		return NIC{}, err
	}
	busID := filepath.Base(pciDir)
	nic := NIC{
		Name:     topology.NICDeviceName(ibdev),
		IBDevice: ibdev,
		Rail:     NoRail,
		PCI:      readPCIInfo(ctx, sysfsRoot, busID),
		PCIClass: readTrimmed(filepath.Join(pciDir, "class")),
	}
	nic.Port, err = firstPort(filepath.Join(dir, "ports"))
	if err != nil {
		return nic, err
	}
	readPort(ctx, &nic, filepath.Join(dir, "ports", strconv.Itoa(nic.Port)))
	if guid := readTrimmed(filepath.Join(dir, "node_guid")); validGUID(guid) {
		nic.NodeGUID = guid
	} else {
		logger.Error(nil, "Ignoring unreadable node_guid", "value", guid)
	}
	nic.DeviceNodes = nicDeviceNodes(ctx, pciDir, devRoot)
	return nic, nil
}

// hcaPCIDir returns the resolved PCI device directory of an HCA: the target
// of its "device" link or, when that is missing or broken, the directory two
// levels above the resolved class entry (class/infiniband/mlx5_N links to
// <pci device>/infiniband/mlx5_N).
func hcaPCIDir(dir string) (string, error) {
	pciDir, err := filepath.EvalSymlinks(filepath.Join(dir, "device"))
	if err != nil {
		entry, err2 := filepath.EvalSymlinks(dir)
		if err2 != nil {
			return "", fmt.Errorf("resolve pci device: %w", err)
		}
		pciDir = filepath.Dir(filepath.Dir(entry))
	}
	if err := validBusID(filepath.Base(pciDir)); err != nil {
		return "", fmt.Errorf("resolve pci device: %w", err)
	}
	return pciDir, nil
}

// readPort fills the port's state, link layer and rate and taints a port
// that is not up.
func readPort(ctx context.Context, nic *NIC, dir string) {
	logger := klog.FromContext(ctx)
	var stateOK bool
	nic.PortState, stateOK = parseEnumFile(filepath.Join(dir, "state"))
	nic.PhysState, _ = parseEnumFile(filepath.Join(dir, "phys_state"))
	nic.LinkLayer = readTrimmed(filepath.Join(dir, "link_layer"))
	rate := readTrimmed(filepath.Join(dir, "rate"))
	if gbps, err := parseRate(rate); err != nil {
		logger.Error(err, "Ignoring unreadable port rate", "port", nic.Port)
	} else {
		nic.RateGbps = gbps
	}
	switch {
	case !stateOK:
		logger.Error(nil, "Port state unreadable, tainting NIC", "port", nic.Port)
		nic.Taints = append(nic.Taints, newTaint(topology.TaintPortDown, fmt.Sprintf("port %d state unreadable", nic.Port)))
	case nic.PortState != portStateActive:
		nic.Taints = append(nic.Taints, newTaint(topology.TaintPortDown, fmt.Sprintf("port %d %s %s", nic.Port, nic.PortState, nic.PhysState)))
	}
}

// firstPort returns the lowest port number under an HCA's ports directory.
func firstPort(dir string) (int, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return 0, fmt.Errorf("hca has no port: %w", err)
	}
	best := -1
	for _, e := range entries {
		if n, err := strconv.Atoi(e.Name()); err == nil && n > 0 && (best < 0 || n < best) {
			best = n
		}
	}
	if best < 0 {
		return 0, errors.New("hca has no port")
	}
	return best, nil
}

// nicDeviceNodes returns /dev/infiniband/uverbsN (from the PCI device's
// infiniband_verbs directory) and /dev/infiniband/rdma_cm. An HCA without a
// verbs device keeps only rdma_cm (logged).
func nicDeviceNodes(ctx context.Context, pciDir, devRoot string) []string {
	ib := filepath.Join(devRoot, "infiniband")
	entries, err := os.ReadDir(filepath.Join(pciDir, "infiniband_verbs"))
	var nodes []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "uverbs") {
			nodes = append(nodes, filepath.Join(ib, e.Name()))
		}
	}
	if len(nodes) == 0 {
		klog.FromContext(ctx).Error(err, "HCA has no uverbs device; only rdma_cm is available")
	}
	return append(nodes, filepath.Join(ib, "rdma_cm"))
}

// parseEnumFile reads a sysfs "N: NAME" file such as ports/1/state
// ("4: ACTIVE"). It returns UNKNOWN and false when the file is missing or
// not in that form.
func parseEnumFile(path string) (string, bool) {
	num, name, ok := strings.Cut(readTrimmed(path), ":")
	name = strings.TrimSpace(name)
	if _, err := strconv.Atoi(strings.TrimSpace(num)); !ok || err != nil || name == "" {
		return portStateUnknown, false
	}
	return name, true
}

// parseRate reads ports/N/rate, "400 Gb/sec (4X NDR)", as whole Gb/s
// (fractions are dropped: "2.5 Gb/sec" is 2).
func parseRate(s string) (int, error) {
	num, unit, ok := strings.Cut(s, " ")
	if !ok || !strings.HasPrefix(unit, "Gb/sec") {
		return 0, fmt.Errorf("unexpected rate %q", s)
	}
	f, err := strconv.ParseFloat(num, 64)
	if err != nil || f < 0 {
		return 0, fmt.Errorf("unexpected rate %q", s)
	}
	return int(f), nil
}

// validGUID accepts the sysfs node_guid form, four groups of four hex
// digits: "0c42:a103:0012:3456".
func validGUID(s string) bool {
	parts := strings.Split(s, ":")
	if len(parts) != 4 {
		return false
	}
	for _, p := range parts {
		if _, err := strconv.ParseUint(p, 16, 16); err != nil || len(p) != 4 {
			return false
		}
	}
	return true
}

func readTrimmed(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// compareIBDevice orders mlx5_2 before mlx5_10.
func compareIBDevice(a, b string) int {
	pa, na := splitTrailingNumber(a)
	pb, nb := splitTrailingNumber(b)
	if c := strings.Compare(pa, pb); c != 0 {
		return c
	}
	return na - nb
}

func splitTrailingNumber(s string) (string, int) {
	i := len(s)
	for i > 0 && s[i-1] >= '0' && s[i-1] <= '9' {
		i--
	}
	n, _ := strconv.Atoi(s[i:])
	return s[:i], n
}
