package mock

// The fabric file as written. See the package doc and docs/fabric-file.md.

// fileSpec is a whole fabric file.
type fileSpec struct {
	NodeGroups []groupSpec `json:"nodeGroups"`
	Faults     []faultSpec `json:"faults,omitempty"`
}

// groupSpec is a set of identical nodes.
type groupSpec struct {
	// Name is a node name, or a printf pattern with one %d verb
	// ("gb200-r1-n%02d") expanded Count times from Start.
	Name  string `json:"name"`
	Count *int   `json:"count,omitempty"`
	Start *int   `json:"start,omitempty"`
	// Labels are the nodes' labels (kubernetes.io/hostname is added).
	Labels        map[string]string `json:"labels,omitempty"`
	GPUs          gpuSpec           `json:"gpus"`
	NVLink        nvlinkSpec        `json:"nvlink"`
	HCAs          hcaSpec           `json:"hcas,omitempty"`
	DriverVersion string            `json:"driverVersion,omitempty"`
	NUMANodes     *int              `json:"numaNodes,omitempty"`
	Allocatable   map[string]string `json:"allocatable,omitempty"`
}

type gpuSpec struct {
	Model string `json:"model"`
	Count *int   `json:"count,omitempty"`
}

type nvlinkSpec struct {
	// Kind is mnnvl, nvswitch or none.
	Kind        string `json:"kind"`
	ClusterUUID string `json:"clusterUUID,omitempty"`
	CliqueID    *int64 `json:"cliqueID,omitempty"`
	// GPUCliqueIDs optionally gives each GPU's clique; all must be equal.
	GPUCliqueIDs []int64 `json:"gpuCliqueIDs,omitempty"`
}

type hcaSpec struct {
	Count     int    `json:"count,omitempty"`
	LinkLayer string `json:"linkLayer,omitempty"`
	RateGbps  int    `json:"rateGbps,omitempty"`
	// GPURails gives the rail of the HCA that shares a PCIe switch with
	// each GPU; default spreads GPUs evenly over the rails in order.
	GPURails []int `json:"gpuRails,omitempty"`
}

// faultSpec breaks something on one node. At least one fault kind is set.
type faultSpec struct {
	Node               string           `json:"node"`
	FabricNotCompleted *fabricFaultSpec `json:"fabricNotCompleted,omitempty"`
	NVLinkDegraded     *nvlinkFaultSpec `json:"nvlinkDegraded,omitempty"`
	PortDown           *portFaultSpec   `json:"portDown,omitempty"`
	NVMLError          *nvmlFaultSpec   `json:"nvmlError,omitempty"`
	MIGEnabled         *gpuSetFaultSpec `json:"migEnabled,omitempty"`
	Sysfs              *sysfsFaultSpec  `json:"sysfs,omitempty"`
	IMEX               *imexFaultSpec   `json:"imex,omitempty"`
	XID                *xidFaultSpec    `json:"xid,omitempty"`
	ECC                *eccFaultSpec    `json:"ecc,omitempty"`
	DriverFiles        *driverFaultSpec `json:"driverFiles,omitempty"`
	NVLinkErrors       *nvlinkErrorSpec `json:"nvlinkErrors,omitempty"`
	IBCounters         *ibCounterSpec   `json:"ibCounters,omitempty"`
	EventSet           *eventSetSpec    `json:"eventSet,omitempty"`
}

// nvlinkErrorSpec sets or raises one NVLink error counter of a GPU link
// (NVML's GetNvLinkErrorCounter). Exactly one of Set and Add.
type nvlinkErrorSpec struct {
	GPU  int `json:"gpu"`
	Link int `json:"link"`
	// Counter is replay, recovery, crcFlit or crcData.
	Counter string  `json:"counter"`
	Set     *uint64 `json:"set,omitempty"`
	Add     *uint64 `json:"add,omitempty"`
}

// ibCounterSpec sets or raises one counter of an HCA's port (sysfs
// ports/1/counters/<counter>). Exactly one of Set and Add.
type ibCounterSpec struct {
	Rail int `json:"rail"`
	// Counter is link_downed, symbol_error, port_rcv_errors or
	// link_error_recovery.
	Counter string  `json:"counter"`
	Set     *uint64 `json:"set,omitempty"`
	Add     *uint64 `json:"add,omitempty"`
}

// eventSetSpec breaks the node's NVML event sets.
type eventSetSpec struct {
	// CreateFailures: the first this many EventSetCreate calls of one
	// backend fail with ERROR_UNKNOWN (a watcher that dies and restarts).
	CreateFailures int `json:"createFailures"`
}

// driverFaultSpec breaks the node's driver installation (the files a CDI
// spec mounts into containers).
type driverFaultSpec struct {
	// Missing: no driver libraries, binaries or firmware (a driver
	// container still starting, a wrong --driver-root).
	Missing bool `json:"missing"`
}

// xidFaultSpec is an Xid error event of one GPU, delivered through the
// mock's NVML event set once it is in the file.
type xidFaultSpec struct {
	GPU int    `json:"gpu"`
	XID uint64 `json:"xid"`
}

// eccFaultSpec is an ECC error event of one GPU.
type eccFaultSpec struct {
	GPU int `json:"gpu"`
	// Type is DoubleBit (uncorrectable, default) or SingleBit (corrected).
	Type string `json:"type,omitempty"`
}

type gpuSetFaultSpec struct {
	// GPUs are GPU indexes; empty means every GPU of the node.
	GPUs []int `json:"gpus,omitempty"`
}

type fabricFaultSpec struct {
	GPUs []int `json:"gpus,omitempty"`
	// State is NotStarted, InProgress (default) or Failed (completed with
	// an error status).
	State string `json:"state,omitempty"`
}

type nvlinkFaultSpec struct {
	GPU       int `json:"gpu"`
	LinksDown int `json:"linksDown"`
}

type portFaultSpec struct {
	Rail      int    `json:"rail"`
	State     string `json:"state,omitempty"`
	PhysState string `json:"physState,omitempty"`
}

type nvmlFaultSpec struct {
	GPU   int    `json:"gpu"`
	Call  string `json:"call,omitempty"`
	Error string `json:"error,omitempty"`
}

// sysfsFaultSpec breaks the fake sysfs tree of one HCA.
type sysfsFaultSpec struct {
	Rail int `json:"rail"`
	// Break is one of: no-port, no-device-link, no-verbs, garbage-state,
	// garbage-rate, no-rate, garbage-guid, no-numa.
	Break string `json:"break"`
}

// imexFaultSpec breaks a multi-node NVLink node's IMEX support.
type imexFaultSpec struct {
	// Daemon is the IMEX daemon's state: NotReady (it answers NOT_READY)
	// or Down (nothing answers). Empty leaves it READY.
	Daemon string `json:"daemon,omitempty"`
	// Channels overrides the driver's channel count (ImexChannelCount).
	Channels *int `json:"channels,omitempty"`
	// NoDriverSupport removes nvidia-caps-imex-channels from /proc/devices.
	NoDriverSupport bool `json:"noDriverSupport,omitempty"`
}

// Bounds of a fabric file (docs/fabric-file.md, "Limits"). A file beyond
// them is refused with an error naming the file, the group or fault and
// the field, before any work proportional to the excess is done.
const (
	// MaxFileSize is checked before parsing.
	MaxFileSize = 8 << 20
	// MaxNodes counts expanded nodes over all groups.
	MaxNodes       = 10000
	MaxStart       = 1_000_000
	MaxGPUsPerNode = 16
	MaxHCAsPerNode = 16
	MaxNUMANodes   = 8
	MaxRateGbps    = 100_000
	MaxFaults      = 10000
)
