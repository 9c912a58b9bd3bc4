package mock

import (
	"fmt"
	"slices"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// nodeFaults are the faults injected into one node, keyed by GPU index or
// rail.
type nodeFaults struct {
	fabric    map[int]fabricFault
	linksDown map[int]int
	portDown  map[int]portFaultSpec
	nvml      map[int]nvmlFault
	mig       map[int]bool
	sysfs     map[int][]string
	imex      imexFault
	// events are the node's xid and ecc faults in file order.
	events []eventFault
	// driverMissing: the fake driver installation is left empty.
	driverMissing bool
	// nvlinkErrors and ibCounters are error counter values (counters.go).
	nvlinkErrors map[nvlinkCounterKey]uint64
	ibCounters   map[ibCounterKey]uint64
	// eventSetFailures: EventSetCreate calls that fail first.
	eventSetFailures int
}

type fabricFault struct {
	state  nvml.GpuFabricState
	status nvml.Return
}

type nvmlFault struct {
	call string
	ret  nvml.Return
}

// Sysfs breakages a fault may inject into an HCA's fake sysfs tree.
const (
	BreakNoPort       = "no-port"
	BreakNoDeviceLink = "no-device-link"
	BreakNoVerbs      = "no-verbs"
	BreakGarbageState = "garbage-state"
	BreakGarbageRate  = "garbage-rate"
	BreakNoRate       = "no-rate"
	BreakGarbageGUID  = "garbage-guid"
	BreakNoNUMA       = "no-numa"
	// BreakMissing: the HCA is not enumerated at all (dead or pulled); its
	// PCIe switch stays, and the kernel names the HCAs after it one lower.
	BreakMissing = "missing"
)

func knownBreaks() []string {
	return []string{BreakNoPort, BreakNoDeviceLink, BreakNoVerbs, BreakGarbageState, BreakGarbageRate, BreakNoRate, BreakGarbageGUID, BreakNoNUMA, BreakMissing}
}

// applyFault validates fault i and records it on its node.
func (f *Fabric) applyFault(i int, s faultSpec) error {
	n, ok := f.index[s.Node]
	if !ok {
		return fmt.Errorf("faults[%d]: node: unknown node %q", i, s.Node)
	}
	errf := func(field, format string, args ...any) error {
		return fmt.Errorf("node %s: faults[%d].%s: %s", s.Node, i, field, fmt.Sprintf(format, args...))
	}
	if s.FabricNotCompleted == nil && s.NVLinkDegraded == nil && s.PortDown == nil && s.NVMLError == nil && s.MIGEnabled == nil && s.Sysfs == nil && s.IMEX == nil &&
		s.XID == nil && s.ECC == nil && s.DriverFiles == nil && s.NVLinkErrors == nil && s.IBCounters == nil && s.EventSet == nil {
		return fmt.Errorf("node %s: faults[%d]: names no fault", s.Node, i)
	}
	for _, apply := range []func(*node, faultSpec, errFunc) error{applyFabric, applyNVLink, applyPort, applyNVML, applyMIG, applySysfs, applyIMEX, applyEvents, applyDriverFiles, applyNVLinkErrors, applyIBCounters, applyEventSet} {
		if err := apply(n, s, errf); err != nil {
			return err
		}
	}
	return nil
}

func checkGPUs(n *node, gpus []int, field string, errf errFunc) ([]int, error) {
	if len(gpus) == 0 {
		for g := range n.gpuCount {
			gpus = append(gpus, g)
		}
	}
	for _, g := range gpus {
		if g < 0 || g >= n.gpuCount {
			return nil, errf(field, "GPU %d does not exist (the node has %d GPUs)", g, n.gpuCount)
		}
	}
	return gpus, nil
}

func checkRail(n *node, rail int, field string, errf errFunc) error {
	if rail < 0 || rail >= n.hcaCount {
		return errf(field, "rail %d does not exist (the node has %d HCAs)", rail, n.hcaCount)
	}
	return nil
}

func applyFabric(n *node, s faultSpec, errf errFunc) error {
	fs := s.FabricNotCompleted
	if fs == nil {
		return nil
	}
	if !n.model.fabricCapable() || n.kind == "none" {
		return errf("fabricNotCompleted", "model %s with nvlink kind %s has no fabric registration", n.modelName, n.kind)
	}
	gpus, err := checkGPUs(n, fs.GPUs, "fabricNotCompleted.gpus", errf)
	if err != nil {
		return err
	}
	ff := fabricFault{state: nvml.GPU_FABRIC_STATE_IN_PROGRESS, status: nvml.SUCCESS}
	switch fs.State {
	case "", "InProgress":
	case "NotStarted":
		ff.state = nvml.GPU_FABRIC_STATE_NOT_STARTED
	case "Failed":
		ff = fabricFault{state: nvml.GPU_FABRIC_STATE_COMPLETED, status: nvml.ERROR_UNKNOWN}
	default:
		return errf("fabricNotCompleted.state", "must be NotStarted, InProgress or Failed, got %q", fs.State)
	}
	n.faults.fabric = setAll(n.faults.fabric, gpus, ff)
	return nil
}

func applyNVLink(n *node, s faultSpec, errf errFunc) error {
	ls := s.NVLinkDegraded
	if ls == nil {
		return nil
	}
	if _, err := checkGPUs(n, []int{ls.GPU}, "nvlinkDegraded.gpu", errf); err != nil {
		return err
	}
	if n.kind == "none" || ls.LinksDown < 1 || ls.LinksDown > n.model.nvlinks {
		return errf("nvlinkDegraded.linksDown", "must be 1..%d for a %s GPU with nvlink kind %s, got %d", n.model.nvlinks, n.modelName, n.kind, ls.LinksDown)
	}
	n.faults.linksDown = setAll(n.faults.linksDown, []int{ls.GPU}, ls.LinksDown)
	return nil
}

func applyPort(n *node, s faultSpec, errf errFunc) error {
	ps := s.PortDown
	if ps == nil {
		return nil
	}
	if err := checkRail(n, ps.Rail, "portDown.rail", errf); err != nil {
		return err
	}
	p := *ps
	if p.State == "" {
		p.State = "DOWN"
	}
	if p.PhysState == "" {
		p.PhysState = "Disabled"
	}
	if _, ok := portStateNumbers()[p.State]; !ok {
		return errf("portDown.state", "must be one of DOWN, INIT, ARMED, ACTIVE, got %q", p.State)
	}
	if _, ok := physStateNumbers()[p.PhysState]; !ok {
		return errf("portDown.physState", "must be one of Sleep, Polling, Disabled, LinkUp, got %q", p.PhysState)
	}
	n.faults.portDown = setAll(n.faults.portDown, []int{ps.Rail}, p)
	return nil
}

func applyNVML(n *node, s faultSpec, errf errFunc) error {
	es := s.NVMLError
	if es == nil {
		return nil
	}
	if _, err := checkGPUs(n, []int{es.GPU}, "nvmlError.gpu", errf); err != nil {
		return err
	}
	nf := nvmlFault{call: es.Call, ret: nvml.ERROR_UNKNOWN}
	if nf.call == "" {
		nf.call = CallGetMemoryInfo
	}
	if !slices.Contains(knownCalls(), nf.call) {
		return errf("nvmlError.call", "unknown call %q (known: %s)", es.Call, strings.Join(knownCalls(), ", "))
	}
	if es.Error != "" {
		ret, ok := nvmlErrors()[es.Error]
		if !ok {
			return errf("nvmlError.error", "unknown error %q", es.Error)
		}
		nf.ret = ret
	}
	n.faults.nvml = setAll(n.faults.nvml, []int{es.GPU}, nf)
	return nil
}

func applyMIG(n *node, s faultSpec, errf errFunc) error {
	if s.MIGEnabled == nil {
		return nil
	}
	gpus, err := checkGPUs(n, s.MIGEnabled.GPUs, "migEnabled.gpus", errf)
	if err != nil {
		return err
	}
	n.faults.mig = setAll(n.faults.mig, gpus, true)
	return nil
}

func applySysfs(n *node, s faultSpec, errf errFunc) error {
	ss := s.Sysfs
	if ss == nil {
		return nil
	}
	if err := checkRail(n, ss.Rail, "sysfs.rail", errf); err != nil {
		return err
	}
	if !slices.Contains(knownBreaks(), ss.Break) {
		return errf("sysfs.break", "unknown breakage %q (known: %s)", ss.Break, strings.Join(knownBreaks(), ", "))
	}
	if n.faults.sysfs == nil {
		n.faults.sysfs = map[int][]string{}
	}
	n.faults.sysfs[ss.Rail] = append(n.faults.sysfs[ss.Rail], ss.Break)
	return nil
}

func setAll[V any](m map[int]V, keys []int, v V) map[int]V {
	if m == nil {
		m = map[int]V{}
	}
	for _, k := range keys {
		m[k] = v
	}
	return m
}

// portStateNumbers are the numbers sysfs prints before IB port states.
func portStateNumbers() map[string]int {
	return map[string]int{"DOWN": 1, "INIT": 2, "ARMED": 3, "ACTIVE": 4}
}

func physStateNumbers() map[string]int {
	return map[string]int{"Sleep": 1, "Polling": 2, "Disabled": 3, "LinkUp": 5}
}

func applyDriverFiles(n *node, s faultSpec, errf errFunc) error {
	if s.DriverFiles == nil {
		return nil
	}
	if !s.DriverFiles.Missing {
		return errf("driverFiles", "names no fault (missing: true is the only one)")
	}
	n.faults.driverMissing = true
	return nil
}
