// Package mock turns a fabric file (YAML describing a whole GPU cluster)
// into what pkg/devices discovers on each node: a mock nvml.Interface built
// on go-nvml's DGX mock servers plus a fake sysfs and /dev tree on disk, so
// the same discovery code runs on mock and real hardware. The full format is
// in docs/fabric-file.md; in short:
//
//	nodeGroups:                       # identical nodes
//	- name: gb200-r1-n%02d            # a name, or a pattern with one %d
//	  count: 18                       # default 1
//	  start: 1                        # first index, default 1
//	  labels: {topology.gpufabric.dev/rack: rack-1}
//	  gpus: {model: GB200, count: 4}  # A100 A100-40GB A100-PCIE H100 H200 B200 GB200
//	  nvlink: {kind: mnnvl, clusterUUID: <uuid>, cliqueID: 1}  # or nvswitch / none
//	  hcas: {count: 4, linkLayer: InfiniBand, rateGbps: 400, gpuRails: [0, 1, 2, 3]}
//	  driverVersion: "570.124.06"     # default: the DGX mock's
//	  numaNodes: 2                    # default 2
//	  allocatable: {cpu: "144", memory: 960Gi, pods: "110"}  # default by model
//	faults:                           # per node; any combination
//	- node: gb200-r1-n03
//	  fabricNotCompleted: {gpus: [0], state: InProgress}  # NotStarted, InProgress, Failed
//	  nvlinkDegraded: {gpu: 2, linksDown: 2}
//	  portDown: {rail: 1, state: DOWN, physState: Disabled}
//	  nvmlError: {gpu: 3, call: GetMemoryInfo, error: ERROR_UNKNOWN}
//	  migEnabled: {gpus: [1]}
//	  sysfs: {rail: 0, break: no-port}
//	  nvlinkErrors: {gpu: 1, link: 3, counter: replay, add: 20}  # or set: N
//	  ibCounters: {rail: 2, counter: symbol_error, add: 50}       # sysfs port counters
//	  eventSet: {createFailures: 2}   # the first 2 NVML event sets fail
//
// Rules the mock follows:
//   - Files are bounded (8 MiB, 10,000 nodes, 16 GPUs and 16 HCAs per
//     node, 10,000 faults; see the Max constants) before any work
//     proportional to the excess is done.
//   - Decoding is strict: unknown fields, duplicate keys, unknown models,
//     duplicate nodes, rails or GPUs that do not exist, and a node whose GPUs
//     claim two cliques fail with an error naming the file, the node (or
//     node group / fault) and the field.
//   - Each node's PCI tree has one PCIe switch per HCA (rail r's HCA first,
//     then the GPUs whose gpuRails entry is r) under its own root complex;
//     bus ids grow with the rail. NVML's PCI bus ids (which go-nvml's mocks
//     leave empty) match the fake tree, so GPU-to-HCA nearness is computed
//     from sysfs paths like on hardware.
//   - The mock sets exactly the NVML calls discovery makes; every other
//     call panics, as in go-nvml, so tests prove what discovery calls.
//   - UUIDs, GUIDs and bus ids derive from node names: output is
//     deterministic.
//
// Entry points: LoadFile or Parse; Fabric.Nodes; Fabric.Backend (one node
// as a devices.Backend, for the kubelet plugin's mock mode and tests);
// Fabric.DiscoverAll / DiscoverNode (each node's Node object with labels,
// Inventory, DriverResources and ResourceSlices, for scheduler tests).
//
// It is production code: the kubelet plugin links it for --backend=mock
// (--mock-fabric), which is how kind, the Helm chart's mock profile and the
// demo run without GPUs. The fixture fabrics live next to it in fabrics/.
package mock
