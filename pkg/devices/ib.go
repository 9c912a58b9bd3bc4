package devices

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/klog/v2"

	"github.com/gpufabric/gpufabric/pkg/topology"
)

// Port states as sysfs names them.
const (
	portStateActive  = "ACTIVE"
	portStateUnknown = "UNKNOWN"
	linkLayerIB      = "InfiniBand"
)

// Bounds on what sysfs may report.
const (
	// maxSysfsFileSize is the most readTrimmed reads of a file: sysfs
	// attributes are at most one page.
	maxSysfsFileSize = 4096
	// maxRateGbps is the highest port rate accepted (a 1.6 Tb/s port is
	// 1600); anything above is garbage.
	maxRateGbps = 100_000
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
// the next HCA; one whose PCI device is unknown (see hcaPCIDir) has no slot
// and does not count (logged; with a rail map the others keep their rails). An
// HCA whose name gives no valid device name (NICDeviceName must be a DNS
// label) or the name of an HCA listed before it is skipped but keeps its
// rail. Unreadable rate,
// link layer or node GUID leave those attributes out. Rails are numbered by
// numberRails with prev, and the rail map to remember is returned. The
// result is sorted by IB device name.
//
// The only error is ctx's, checked before each HCA.
func discoverNICs(ctx context.Context, sysfsRoot, devRoot string, prev *RailMap, gpuPaths []string) ([]NIC, *RailMap, error) {
	logger := klog.FromContext(ctx)
	entries, err := os.ReadDir(filepath.Join(sysfsRoot, "class", "infiniband"))
	if errors.Is(err, fs.ErrNotExist) {
		logger.V(2).Info("No RDMA devices: class/infiniband does not exist", "sysfsRoot", sysfsRoot)
		return nil, prev, nil
	}
	if err != nil {
		logger.Error(err, "Listing RDMA devices failed; publishing no NICs")
		return nil, prev, nil
	}
	var nics []NIC
	var unusable []error
	seen := map[string]string{} // published name -> IB device
	for _, e := range entries {
		if err := ctx.Err(); err != nil {
			return nil, nil, fmt.Errorf("discover nics: %w", context.Cause(ctx))
		}
		nicLogger := logger.WithValues("ibDevice", e.Name())
		nic, err := readNIC(klog.NewContext(ctx, nicLogger), sysfsRoot, devRoot, e.Name())
		if err != nil && nic.IBDevice == "" {
			nicLogger.Error(err, "Skipping HCA; it does not count as a rail")
			continue
		}
		if err == nil && seen[nic.Name] != "" {
			err = fmt.Errorf("device name %s is already taken by %s", nic.Name, seen[nic.Name])
		} else if err == nil {
			seen[nic.Name] = nic.IBDevice
		}
		nics = append(nics, nic)
		unusable = append(unusable, err)
	}
	rails := numberRails(nics, prev, gpuPaths)
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
	return nics, rails, nil
}

// readNIC reads one HCA. It returns an empty NIC and an error when the
// HCA's PCI device is unknown, and the NIC read so far and an error when its
// name gives no valid device name or it has no port.
func readNIC(ctx context.Context, sysfsRoot, devRoot, ibdev string) (NIC, error) {
	logger := klog.FromContext(ctx)
	dir := filepath.Join(sysfsRoot, "class", "infiniband", ibdev)
	pciDir, err := hcaPCIDir(sysfsRoot, dir)
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
	if msgs := validation.IsDNS1123Label(nic.Name); len(msgs) > 0 {
		return nic, fmt.Errorf("hca name gives no valid device name %q: %s", nic.Name, strings.Join(msgs, "; "))
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
	nic.PortGUID = portGUID(readTrimmed(filepath.Join(dir, "ports", strconv.Itoa(nic.Port), "gids", "0")), nic.NodeGUID)
	nic.DeviceNodes = nicDeviceNodes(ctx, pciDir, devRoot)
	return nic, nil
}

// hcaPCIDir returns the resolved PCI device directory of an HCA: the target
// of its "device" link or, when that is missing or broken, the directory two
// levels above the resolved class entry (class/infiniband/mlx5_N links to
// <pci device>/infiniband/mlx5_N). It must be a PCI device under the
// resolved <sysfsRoot>/devices, as the kernel's links always are: nothing
// outside the sysfs root is ever read.
func hcaPCIDir(sysfsRoot, dir string) (string, error) {
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
	root, err := filepath.EvalSymlinks(sysfsRoot)
	if err != nil {
		return "", fmt.Errorf("resolve sysfs root: %w", err)
	}
	if rel, err := filepath.Rel(root, pciDir); err != nil || !strings.HasPrefix(filepath.ToSlash(rel), "devices/pci") {
		return "", fmt.Errorf("resolve pci device: %s is not a pci device under %s", pciDir, root)
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
// (fractions are dropped: "2.5 Gb/sec" is 2). Negative, NaN and rates above
// maxRateGbps are errors.
func parseRate(s string) (int, error) {
	num, unit, ok := strings.Cut(s, " ")
	if !ok || !strings.HasPrefix(unit, "Gb/sec") {
		return 0, fmt.Errorf("unexpected rate %q", s)
	}
	f, err := strconv.ParseFloat(num, 64)
	// !(f <= max) also refuses NaN, which converts to a negative int.
	if err != nil || f < 0 || !(f <= maxRateGbps) {
		return 0, fmt.Errorf("unexpected rate %q", s)
	}
	return int(f), nil
}

// portGUID is the low half of a port's GID 0 ("fe80:0000:0000:0000:0c42:
// a103:0012:3456" gives "0c42:a103:0012:3456"), or fallback when the GID is
// not in that form or all zero.
func portGUID(gid, fallback string) string {
	parts := strings.Split(gid, ":")
	if len(parts) == 8 {
		if guid := strings.Join(parts[4:], ":"); validGUID(guid) && guid != "0000:0000:0000:0000" {
			return guid
		}
	}
	return fallback
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

// readTrimmed returns a file's content without surrounding white space,
// reading at most maxSysfsFileSize bytes; "" when it cannot be read.
func readTrimmed(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer func() { _ = f.Close() }()
	b, err := io.ReadAll(io.LimitReader(f, maxSysfsFileSize))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// compareIBDevice orders mlx5_2 before mlx5_10: by the name without its
// trailing digits, then by their number (of any length), then by name
// ("mlx5_01" before "mlx5_1"), so that only equal names compare equal.
func compareIBDevice(a, b string) int {
	pa, da := splitTrailingNumber(a)
	pb, db := splitTrailingNumber(b)
	if c := strings.Compare(pa, pb); c != 0 {
		return c
	}
	da, db = strings.TrimLeft(da, "0"), strings.TrimLeft(db, "0")
	if c := len(da) - len(db); c != 0 {
		return c
	}
	if c := strings.Compare(da, db); c != 0 {
		return c
	}
	return strings.Compare(a, b)
}

// splitTrailingNumber splits s into the part before its trailing decimal
// digits and those digits ("mlx5_10" -> "mlx5_", "10").
func splitTrailingNumber(s string) (prefix, digits string) {
	i := len(s)
	for i > 0 && s[i-1] >= '0' && s[i-1] <= '9' {
		i--
	}
	return s[:i], s[i:]
}
