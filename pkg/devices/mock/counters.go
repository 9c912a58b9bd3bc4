package mock

import (
	"fmt"
	"math"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"

	"github.com/gpufabric/gpufabric/pkg/devices/fabrichealth"
	"github.com/gpufabric/gpufabric/pkg/topology"
)

// Error counters in the mock: nvlinkErrors and ibCounters faults set or
// raise counters, folded in file order. The plugin re-reads the fabric
// file every health interval, so a fault appended to a running plugin's
// file shows up as a counter rising (docs/fabric-file.md).

// MaxEventSetFailures bounds eventSet.createFailures.
const MaxEventSetFailures = 1000

type nvlinkCounterKey struct {
	gpu, link int
	counter   nvml.NvLinkErrorCounter
}

type ibCounterKey struct {
	rail    int
	counter string
}

// nvlinkCounterNames are the fabric file's names of NVML's counters.
func nvlinkCounterNames() map[string]nvml.NvLinkErrorCounter {
	return map[string]nvml.NvLinkErrorCounter{
		"replay": nvml.NVLINK_ERROR_DL_REPLAY, "recovery": nvml.NVLINK_ERROR_DL_RECOVERY,
		"crcFlit": nvml.NVLINK_ERROR_DL_CRC_FLIT, "crcData": nvml.NVLINK_ERROR_DL_CRC_DATA,
	}
}

// counterValue applies a set or add to the old value (adds saturate).
func counterValue(old uint64, set, add *uint64, field string, errf errFunc) (uint64, error) {
	switch {
	case (set == nil) == (add == nil):
		return 0, errf(field, "exactly one of set and add is required")
	case set != nil:
		return *set, nil
	case old > math.MaxUint64-*add:
		return math.MaxUint64, nil
	}
	return old + *add, nil
}

func applyNVLinkErrors(n *node, s faultSpec, errf errFunc) error {
	e := s.NVLinkErrors
	if e == nil {
		return nil
	}
	if _, err := checkGPUs(n, []int{e.GPU}, "nvlinkErrors.gpu", errf); err != nil {
		return err
	}
	if n.kind == topology.DomainKindNone || e.Link < 0 || e.Link >= n.model.nvlinks {
		return errf("nvlinkErrors.link", "must be 0..%d for a %s GPU with nvlink kind %s, got %d", n.model.nvlinks-1, n.modelName, n.kind, e.Link)
	}
	c, ok := nvlinkCounterNames()[e.Counter]
	if !ok {
		return errf("nvlinkErrors.counter", "must be replay, recovery, crcFlit or crcData, got %q", e.Counter)
	}
	if n.faults.nvlinkErrors == nil {
		n.faults.nvlinkErrors = map[nvlinkCounterKey]uint64{}
	}
	k := nvlinkCounterKey{e.GPU, e.Link, c}
	v, err := counterValue(n.faults.nvlinkErrors[k], e.Set, e.Add, "nvlinkErrors", errf)
	n.faults.nvlinkErrors[k] = v
	return err
}

func applyIBCounters(n *node, s faultSpec, errf errFunc) error {
	e := s.IBCounters
	if e == nil {
		return nil
	}
	if err := checkRail(n, e.Rail, "ibCounters.rail", errf); err != nil {
		return err
	}
	known := false
	for _, c := range fabrichealth.IBCounters() {
		known = known || c == e.Counter
	}
	if !known {
		return errf("ibCounters.counter", "must be link_downed, symbol_error, port_rcv_errors or link_error_recovery, got %q", e.Counter)
	}
	if n.faults.ibCounters == nil {
		n.faults.ibCounters = map[ibCounterKey]uint64{}
	}
	k := ibCounterKey{e.Rail, e.Counter}
	v, err := counterValue(n.faults.ibCounters[k], e.Set, e.Add, "ibCounters", errf)
	n.faults.ibCounters[k] = v
	return err
}

func applyEventSet(n *node, s faultSpec, errf errFunc) error {
	e := s.EventSet
	if e == nil {
		return nil
	}
	if e.CreateFailures < 1 || e.CreateFailures > MaxEventSetFailures {
		return errf("eventSet.createFailures", "must be 1..%d, got %d", MaxEventSetFailures, e.CreateFailures)
	}
	n.faults.eventSetFailures += e.CreateFailures
	if n.faults.eventSetFailures > MaxEventSetFailures {
		n.faults.eventSetFailures = MaxEventSetFailures
	}
	return nil
}

// setNVLinkErrors answers GetNvLinkErrorCounter as setNVLinks answers the
// link state: kind none has no NVLink, links past the model's do not
// exist, and every counter is 0 unless a fault set it.
func setNVLinkErrors(n *node, i int, dev *server.Device) {
	links := n.model.nvlinks
	noNVLink := n.kind == topology.DomainKindNone || links == 0
	counters := map[nvlinkCounterKey]uint64{}
	for k, v := range n.faults.nvlinkErrors {
		if k.gpu == i {
			counters[k] = v
		}
	}
	dev.GetNvLinkErrorCounterFunc = func(link int, c nvml.NvLinkErrorCounter) (uint64, nvml.Return) {
		switch {
		case noNVLink:
			return 0, nvml.ERROR_NOT_SUPPORTED
		case link < 0 || link >= links || c > nvml.NVLINK_ERROR_DL_CRC_DATA:
			return 0, nvml.ERROR_INVALID_ARGUMENT
		}
		return counters[nvlinkCounterKey{i, link, c}], nvml.SUCCESS
	}
}

// failEventSets makes the first failures EventSetCreate calls fail.
func failEventSets(s *server.Server, failures int) {
	if failures == 0 {
		return
	}
	create := s.EventSetCreateFunc
	left := failures
	s.EventSetCreateFunc = func() (nvml.EventSet, nvml.Return) {
		if left > 0 {
			left--
			return nil, nvml.ERROR_UNKNOWN
		}
		return create()
	}
}

// writeIBCounters writes the port's counters: every counter the plugin
// reads, 0 unless a fault set it.
func writeIBCounters(n *node, w *treeWriter, rail int, port string) {
	for _, c := range fabrichealth.IBCounters() {
		w.file(port+"counters/"+c, fmt.Sprintf("%d\n", n.faults.ibCounters[ibCounterKey{rail, c}]))
	}
}
