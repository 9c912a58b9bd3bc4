package mock

import (
	"os"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
)

// GPU events in the mock: the xid and ecc faults of a node, in file order,
// are the events its NVML event set delivers, each once. The event set
// watches the fabric file: an event appended while the plugin runs is
// delivered within eventPoll, as NVML would deliver it when it happens.

// ECC fault types.
const (
	ECCDoubleBit = "DoubleBit"
	ECCSingleBit = "SingleBit"
)

// eventPoll is how often a waiting event set looks at the fabric file.
const eventPoll = 20 * time.Millisecond

// noInstance is NVML's GPU/compute instance id of a whole-GPU event.
const noInstance = 0xFFFFFFFF

type eventFault struct {
	gpu  int
	typ  uint64
	data uint64
}

func applyEvents(n *node, s faultSpec, errf errFunc) error {
	if x := s.XID; x != nil {
		if _, err := checkGPUs(n, []int{x.GPU}, "xid.gpu", errf); err != nil {
			return err
		}
		if x.XID < 1 || x.XID > 65535 {
			return errf("xid.xid", "must be 1..65535, got %d", x.XID)
		}
		n.faults.events = append(n.faults.events, eventFault{gpu: x.GPU, typ: nvml.EventTypeXidCriticalError, data: x.XID})
	}
	if e := s.ECC; e != nil {
		if _, err := checkGPUs(n, []int{e.GPU}, "ecc.gpu", errf); err != nil {
			return err
		}
		typ := uint64(nvml.EventTypeDoubleBitEccError)
		switch e.Type {
		case "", ECCDoubleBit:
		case ECCSingleBit:
			typ = nvml.EventTypeSingleBitEccError
		default:
			return errf("ecc.type", "must be %s or %s, got %q", ECCDoubleBit, ECCSingleBit, e.Type)
		}
		n.faults.events = append(n.faults.events, eventFault{gpu: e.GPU, typ: typ})
	}
	return nil
}

// eventSource reads a node's current event faults: from the fabric file
// when it changed since the last look, else the ones it had.
type eventSource struct {
	path, node string
	events     []eventFault
	stamp      [2]int64 // size, mtime of the file last read
}

func (src *eventSource) current() []eventFault {
	fi, err := os.Stat(src.path)
	if err != nil {
		return src.events
	}
	stamp := [2]int64{fi.Size(), fi.ModTime().UnixNano()}
	if stamp == src.stamp {
		return src.events
	}
	src.stamp = stamp
	f, err := LoadFile(src.path)
	if err != nil {
		return src.events // a half-written file: the next look reads it
	}
	if n, ok := f.index[src.node]; ok {
		src.events = n.faults.events
	}
	return src.events
}

// eventSet is the mock of one NVML event set.
type eventSet struct {
	mu        sync.Mutex
	src       *eventSource
	devices   []nvml.Device
	masks     map[int]uint64 // registered GPU index -> event mask
	delivered int            // events of src delivered (or skipped)
}

// setEvents makes the server's event sets deliver the event faults of
// node (read again from the fabric file at path when it changes).
func setEvents(s *server.Server, path, node string, events []eventFault) {
	s.EventSetCreateFunc = func() (nvml.EventSet, nvml.Return) {
		es := &eventSet{src: &eventSource{path: path, node: node, events: events}, devices: s.Devices, masks: map[int]uint64{}}
		if fi, err := os.Stat(path); err == nil {
			es.src.stamp = [2]int64{fi.Size(), fi.ModTime().UnixNano()}
		}
		return es, nvml.SUCCESS
	}
	supported := uint64(nvml.EventTypeXidCriticalError | nvml.EventTypeDoubleBitEccError | nvml.EventTypeSingleBitEccError)
	for i, d := range s.Devices {
		dev := d.(*server.Device)
		dev.GetSupportedEventTypesFunc = func() (uint64, nvml.Return) { return supported, nvml.SUCCESS }
		dev.RegisterEventsFunc = func(mask uint64, set nvml.EventSet) nvml.Return {
			es, ok := set.(*eventSet)
			if !ok {
				return nvml.ERROR_INVALID_ARGUMENT
			}
			es.mu.Lock()
			defer es.mu.Unlock()
			es.masks[i] |= mask
			return nvml.SUCCESS
		}
	}
}

var _ nvml.EventSet = (*eventSet)(nil)

// Free implements nvml.EventSet.
func (es *eventSet) Free() nvml.Return { return nvml.SUCCESS }

// Wait implements nvml.EventSet: the next undelivered event of a
// registered GPU and type, looking at the fabric file every eventPoll, or
// ERROR_TIMEOUT.
func (es *eventSet) Wait(timeoutMs uint32) (nvml.EventData, nvml.Return) {
	deadline := time.Now().Add(time.Duration(timeoutMs) * time.Millisecond)
	for {
		if data, ok := es.next(); ok {
			return data, nvml.SUCCESS
		}
		if !time.Now().Before(deadline) {
			return nvml.EventData{}, nvml.ERROR_TIMEOUT
		}
		time.Sleep(min(eventPoll, time.Until(deadline)))
	}
}

func (es *eventSet) next() (nvml.EventData, bool) {
	es.mu.Lock()
	defer es.mu.Unlock()
	events := es.src.current()
	if es.delivered > len(events) {
		es.delivered = len(events) // faults were removed: only later ones are new
	}
	for es.delivered < len(events) {
		ev := events[es.delivered]
		es.delivered++
		if es.masks[ev.gpu]&ev.typ == 0 || ev.gpu >= len(es.devices) {
			continue
		}
		return nvml.EventData{
			Device: es.devices[ev.gpu], EventType: ev.typ, EventData: ev.data,
			GpuInstanceId: noInstance, ComputeInstanceId: noInstance,
		}, true
	}
	return nvml.EventData{}, false
}
