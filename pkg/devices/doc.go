// Package devices discovers a node's GPUs and InfiniBand HCAs and turns them
// into the node's ResourceSlices.
//
// Discovery reads hardware through a Backend: NVML (go-nvml + go-nvlib) for
// GPUs, our own GPUFabricInfo call for NVLink fabric registration (nvml's
// GetGpuFabricInfoV cannot be mocked), and sysfs under a configurable root
// for PCI paths, NUMA nodes and RDMA devices. NewNVMLBackend reads a real
// node; pkg/devices/mock builds a Backend from a fabric file, so the same code
// runs on both.
//
// Discover returns an Inventory: per GPU and NIC the published attributes,
// taints and what a CDI spec needs (device node host paths, UUIDs, IB device
// names). Inventory.DriverResources turns it into one pool named after the
// node; ResourceSlices renders that as API objects.
//
// Rules (details on each function):
//   - A node never fails discovery because of one device: a GPU that cannot
//     be named is skipped, any other NVML error taints it
//     (topology.TaintNVMLError); a broken HCA is skipped or tainted.
//   - Faults are NoSchedule device taints with label-value reasons:
//     fabric registration not completed, NVLinks down, HCA port not ACTIVE.
//   - A GPU's ibRail is the rail of its nearest HCA by PCIe path.
//   - Standard attributes (resource.kubernetes.io/pciBusID, pcieRoot,
//     numaNode) come from k8s.io/dynamic-resource-allocation/deviceattribute.
package devices
