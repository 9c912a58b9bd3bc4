package fabrichealth

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"k8s.io/klog/v2"
)

// Counter names: the NVLink data-link error counters NVML reports per
// link, and the InfiniBand port counters sysfs has under
// class/infiniband/<hca>/ports/<n>/counters (the file names).
const (
	NVLinkReplay      = "nvlink_replay"
	NVLinkRecovery    = "nvlink_recovery"
	NVLinkCRCFlit     = "nvlink_crc_flit"
	NVLinkCRCData     = "nvlink_crc_data"
	LinkDowned        = "link_downed"
	SymbolError       = "symbol_error"
	PortRcvErrors     = "port_rcv_errors"
	LinkErrorRecovery = "link_error_recovery"
)

// NVLinkCounters maps the NVLink counter names to NVML's counters.
func NVLinkCounters() map[string]nvml.NvLinkErrorCounter {
	return map[string]nvml.NvLinkErrorCounter{
		NVLinkReplay: nvml.NVLINK_ERROR_DL_REPLAY, NVLinkRecovery: nvml.NVLINK_ERROR_DL_RECOVERY,
		NVLinkCRCFlit: nvml.NVLINK_ERROR_DL_CRC_FLIT, NVLinkCRCData: nvml.NVLINK_ERROR_DL_CRC_DATA,
	}
}

// IBCounters are the InfiniBand port counters read, in order.
func IBCounters() []string {
	return []string{LinkDowned, SymbolError, PortRcvErrors, LinkErrorRecovery}
}

// nvlinkOrder is the order NVLink counters are read and reported in.
var nvlinkOrder = []string{NVLinkReplay, NVLinkRecovery, NVLinkCRCFlit, NVLinkCRCData}

// maxCounterFile is the most bytes read of one counter file (sysfs
// attributes are at most a page).
const maxCounterFile = 4096

// Reading is one counter's value.
type Reading struct {
	// Device is the published device name (gpu-0, nic-mlx5-0).
	Device  string
	Counter string
	// Link is the NVLink number, or the IB port.
	Link  int
	Value uint64
}

// GPU names a GPU whose NVLink counters are read.
type GPU struct {
	// Name is the published device name; Index the NVML index; UUID must
	// match the handle's (a GPU re-enumerated under another index is
	// skipped).
	Name  string
	Index int
	UUID  string
}

// Port names an HCA port whose counters are read.
type Port struct {
	Name     string
	IBDevice string
	Port     int
}

// ReadNVLinks reads every NVLink error counter of the GPUs. Rules: a link
// whose replay counter answers ERROR_NOT_SUPPORTED or
// ERROR_INVALID_ARGUMENT does not exist (or has no counters) and is
// skipped; any other failure skips that counter (logged at V(4)); a GPU
// without a handle or whose UUID differs is skipped (logged). NVML is
// initialized and shut down around the reads; a failure to initialize
// returns no readings (logged).
func ReadNVLinks(ctx context.Context, lib nvml.Interface, gpus []GPU) []Reading {
	logger := klog.FromContext(ctx)
	if len(gpus) == 0 {
		return nil
	}
	if ret := lib.Init(); ret != nvml.SUCCESS {
		logger.Error(ret, "NVLink error counters not read: NVML init failed")
		return nil
	}
	defer func() { _ = lib.Shutdown() }()
	counters := NVLinkCounters()
	var out []Reading
	for _, g := range gpus {
		dev, ret := lib.DeviceGetHandleByIndex(g.Index)
		if ret != nvml.SUCCESS {
			logger.Error(ret, "NVLink error counters not read: no handle", "gpu", g.Name)
			continue
		}
		if uuid, ret := dev.GetUUID(); ret != nvml.SUCCESS || uuid != g.UUID {
			logger.Error(ret, "NVLink error counters not read: the GPU at this index changed", "gpu", g.Name)
			continue
		}
		for link := range nvml.NVLINK_MAX_LINKS {
			for _, name := range nvlinkOrder {
				v, ret := dev.GetNvLinkErrorCounter(link, counters[name])
				if ret == nvml.ERROR_NOT_SUPPORTED || ret == nvml.ERROR_INVALID_ARGUMENT {
					if name == NVLinkReplay {
						break // no such link
					}
					continue
				}
				if ret != nvml.SUCCESS {
					logger.V(4).Info("NVLink error counter unreadable", "gpu", g.Name, "link", link, "counter", name, "err", ret)
					continue
				}
				out = append(out, Reading{Device: g.Name, Counter: name, Link: link, Value: v})
			}
		}
	}
	return out
}

// ReadIBPorts reads the IBCounters of each port from
// <sysfsRoot>/class/infiniband/<hca>/ports/<port>/counters. A missing,
// unreadable or non-numeric file is left out (logged at V(4)); an HCA name
// with a path separator is skipped.
func ReadIBPorts(ctx context.Context, sysfsRoot string, ports []Port) []Reading {
	logger := klog.FromContext(ctx)
	var out []Reading
	for _, p := range ports {
		if p.IBDevice == "" || strings.ContainsAny(p.IBDevice, "/\x00") || p.IBDevice == "." || p.IBDevice == ".." {
			continue
		}
		dir := filepath.Join(sysfsRoot, "class", "infiniband", p.IBDevice, "ports", strconv.Itoa(p.Port), "counters")
		for _, name := range IBCounters() {
			v, err := readCounter(filepath.Join(dir, name))
			if err != nil {
				logger.V(4).Info("IB port counter unreadable", "nic", p.Name, "counter", name, "err", err)
				continue
			}
			out = append(out, Reading{Device: p.Name, Counter: name, Link: p.Port, Value: v})
		}
	}
	return out
}

// readCounter parses a counter file: one unsigned decimal number.
func readCounter(path string) (uint64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer func() { _ = f.Close() }()
	b, err := io.ReadAll(io.LimitReader(f, maxCounterFile))
	if err != nil {
		return 0, err
	}
	return strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
}
