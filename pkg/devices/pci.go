package devices

import (
	"context"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"

	"k8s.io/dynamic-resource-allocation/deviceattribute"
	"k8s.io/klog/v2"
)

// busIDPattern is the extended BDF form sysfs and the standard attributes
// use: domain:bus:device.function in lower-case hex.
var busIDPattern = regexp.MustCompile(`^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$`)

func validBusID(busID string) error {
	if !busIDPattern.MatchString(busID) {
		return fmt.Errorf("invalid pci bus id %q", busID)
	}
	return nil
}

// readPCIInfo locates a PCI device in sysfs through
// <root>/bus/pci/devices/<busID>. Rules: an unresolvable device keeps only
// its BusID (no PCIe root, no rail); a device without NUMA affinity
// (numa_node -1) or an unreadable numa_node gets no NUMANode. Problems are
// logged, never returned: the device is still published.
func readPCIInfo(ctx context.Context, sysfsRoot, busID string) PCIInfo {
	logger := klog.FromContext(ctx)
	info := PCIInfo{BusID: busID}
	path, err := resolvePCIPath(sysfsRoot, busID)
	if err != nil {
		logger.Error(err, "PCI device not found in sysfs; publishing it without PCIe root", "pciBusID", busID)
		return info
	}
	info.Path = path
	root, err := deviceattribute.GetPCIeRootAttributeByPCIBusID(busID, deviceattribute.WithFSFromRoot(sysfsRoot))
	if err != nil {
		logger.Error(err, "Reading PCIe root failed", "pciBusID", busID)
	} else if root.Value.StringValue != nil {
		info.Root = *root.Value.StringValue
	}
	numa, err := deviceattribute.GetNUMANodeAttributeByPCIBusID(busID, deviceattribute.ScalarAttribute, deviceattribute.WithFSFromRoot(sysfsRoot))
	if err != nil {
		logger.V(2).Info("No NUMA node for PCI device", "pciBusID", busID, "reason", err.Error())
	} else if numa.Value.IntValue != nil {
		n := int(*numa.Value.IntValue)
		info.NUMANode = &n
	}
	return info
}

// resolvePCIPath returns the device's directory relative to sysfsRoot,
// "devices/pci0000:00/.../<busID>".
func resolvePCIPath(sysfsRoot, busID string) (string, error) {
	root, err := filepath.EvalSymlinks(sysfsRoot)
	if err != nil {
		return "", fmt.Errorf("resolve sysfs root: %w", err)
	}
	target, err := filepath.EvalSymlinks(filepath.Join(root, "bus", "pci", "devices", busID))
	if err != nil {
		return "", fmt.Errorf("resolve pci device: %w", err)
	}
	rel, err := filepath.Rel(root, target)
	if err != nil {
		return "", fmt.Errorf("pci device outside sysfs: %w", err)
	}
	rel = filepath.ToSlash(rel)
	if !strings.HasPrefix(rel, "devices/pci") || filepath.Base(rel) != busID {
		return "", fmt.Errorf("pci device %s resolves to unexpected path %q", busID, rel)
	}
	return rel, nil
}

// sharedPCIAncestors scores how close two PCI devices are: the number of leading
// path elements (root complex, root port, switch ports, ...) their sysfs
// paths share. 0 means different root complexes or an unknown path; two
// devices behind one PCIe switch share at least root complex, root port and
// the switch's upstream port.
func sharedPCIAncestors(a, b string) int {
	if a == "" || b == "" {
		return 0
	}
	ea := strings.Split(strings.TrimPrefix(a, "devices/"), "/")
	eb := strings.Split(strings.TrimPrefix(b, "devices/"), "/")
	n := 0
	// The last element is the device itself; never count it.
	for n < len(ea)-1 && n < len(eb)-1 && ea[n] == eb[n] {
		n++
	}
	return n
}
