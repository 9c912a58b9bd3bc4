package devices

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"k8s.io/klog/v2"
)

// MIGManager creates the GPU instance of a MIG partition when a claim is
// prepared and destroys it when it is unprepared. It owns the GPU
// instances of MIG-enabled GPUs in MIGPartitions mode: both calls are
// idempotent by placement (a GPU instance of the partition's profile at its
// start is the partition's), so a prepare redone after a crash finds what
// the first attempt created. Safe for concurrent use.
type MIGManager struct {
	lib      nvml.Interface
	procRoot string
	mu       sync.Mutex
}

// MIGInstance is a created partition as a container sees it.
type MIGInstance struct {
	// UUID is the MIG device's UUID ("MIG-…").
	UUID       string
	GIID, CIID int
	// Caps are the GPU and compute instance access capabilities: character
	// devices /dev/nvidia-caps/nvidia-cap<minor> of the nvidia-caps major,
	// which the runtime creates in the container.
	Caps []CapDevice
}

// CapDevice is one /dev/nvidia-caps node.
type CapDevice struct {
	Path         string
	Major, Minor int
}

// NewMIGManager returns a manager over lib; procRoot holds
// driver/nvidia-caps/mig-minors and devices.
func NewMIGManager(lib nvml.Interface, procRoot string) *MIGManager {
	return &MIGManager{lib: lib, procRoot: procRoot}
}

// Create makes the partition's GPU instance and its full compute instance
// on gpu, or finds them, and returns the MIG device. NVML refuses a
// placement that overlaps another GPU instance.
func (m *MIGManager) Create(ctx context.Context, gpu GPU, p MIGPartition) (MIGInstance, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	dev, done, err := m.open(gpu)
	if err != nil {
		return MIGInstance{}, err
	}
	defer done()
	gi, err := m.gpuInstance(dev, p, true)
	if err != nil {
		return MIGInstance{}, err
	}
	ciInfo, ret := gi.GetComputeInstanceProfileInfo(p.CIProfileID, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
	if ret != nvml.SUCCESS {
		return MIGInstance{}, fmt.Errorf("%s: compute instance profile %d: %w", p.Name, p.CIProfileID, ret)
	}
	cis, ret := gi.GetComputeInstances(&ciInfo)
	if ret != nvml.SUCCESS {
		return MIGInstance{}, fmt.Errorf("%s: list compute instances: %w", p.Name, ret)
	}
	var ci nvml.ComputeInstance
	if len(cis) > 0 {
		ci = cis[0]
	} else if ci, ret = gi.CreateComputeInstance(&ciInfo); ret != nvml.SUCCESS {
		return MIGInstance{}, fmt.Errorf("%s: create compute instance: %w", p.Name, ret)
	}
	giInfo, ret := gi.GetInfo()
	if ret != nvml.SUCCESS {
		return MIGInstance{}, fmt.Errorf("%s: gpu instance info: %w", p.Name, ret)
	}
	cInfo, ret := ci.GetInfo()
	if ret != nvml.SUCCESS {
		return MIGInstance{}, fmt.Errorf("%s: compute instance info: %w", p.Name, ret)
	}
	inst := MIGInstance{GIID: int(giInfo.Id), CIID: int(cInfo.Id)}
	if inst.UUID, err = migUUID(dev, inst.GIID, inst.CIID); err != nil {
		return MIGInstance{}, fmt.Errorf("%s: %w", p.Name, err)
	}
	if inst.Caps, err = m.caps(gpu.Minor, inst.GIID, inst.CIID); err != nil {
		return MIGInstance{}, fmt.Errorf("%s: %w", p.Name, err)
	}
	klog.FromContext(ctx).V(2).Info("MIG partition ready", "device", p.Name, "gi", inst.GIID, "ci", inst.CIID, "uuid", inst.UUID)
	return inst, nil
}

// Destroy removes the partition's compute instances and GPU instance; a
// partition that does not exist is not an error.
func (m *MIGManager) Destroy(ctx context.Context, gpu GPU, p MIGPartition) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	dev, done, err := m.open(gpu)
	if err != nil {
		return err
	}
	defer done()
	gi, err := m.gpuInstance(dev, p, false)
	if err != nil || gi == nil {
		return err
	}
	if ciInfo, ret := gi.GetComputeInstanceProfileInfo(p.CIProfileID, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED); ret == nvml.SUCCESS {
		cis, _ := gi.GetComputeInstances(&ciInfo)
		for _, ci := range cis {
			if ret := ci.Destroy(); ret != nvml.SUCCESS {
				return fmt.Errorf("%s: destroy compute instance: %w", p.Name, ret)
			}
		}
	}
	if ret := gi.Destroy(); ret != nvml.SUCCESS {
		return fmt.Errorf("%s: destroy gpu instance: %w", p.Name, ret)
	}
	klog.FromContext(ctx).V(2).Info("MIG partition destroyed", "device", p.Name)
	return nil
}

// open initializes NVML and finds the GPU by UUID; done shuts NVML down.
func (m *MIGManager) open(gpu GPU) (nvml.Device, func(), error) {
	if ret := m.lib.Init(); ret != nvml.SUCCESS {
		return nil, nil, fmt.Errorf("init nvml: %w", ret)
	}
	done := func() { _ = m.lib.Shutdown() }
	dev, ret := m.lib.DeviceGetHandleByUUID(gpu.UUID)
	if ret != nvml.SUCCESS {
		done()
		return nil, nil, fmt.Errorf("gpu %s: %w", gpu.UUID, ret)
	}
	return dev, done, nil
}

// gpuInstance finds the GPU instance of p's profile at p's start, or
// creates it (with create), or returns nil.
func (m *MIGManager) gpuInstance(dev nvml.Device, p MIGPartition, create bool) (nvml.GpuInstance, error) {
	info, ret := dev.GetGpuInstanceProfileInfo(p.GIProfileID)
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("%s: gpu instance profile %d: %w", p.Name, p.GIProfileID, ret)
	}
	gis, ret := dev.GetGpuInstances(&info)
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("%s: list gpu instances: %w", p.Name, ret)
	}
	for _, gi := range gis {
		if gInfo, ret := gi.GetInfo(); ret == nvml.SUCCESS && int(gInfo.Placement.Start) == p.Start {
			return gi, nil
		}
	}
	if !create {
		return nil, nil
	}
	gi, ret := dev.CreateGpuInstanceWithPlacement(&info, &nvml.GpuInstancePlacement{Start: uint32(p.Start), Size: uint32(p.Size)})
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("%s: create gpu instance at slice %d: %w", p.Name, p.Start, ret)
	}
	return gi, nil
}

// migUUID finds the MIG device of a GPU and compute instance.
func migUUID(dev nvml.Device, giID, ciID int) (string, error) {
	n, ret := dev.GetMaxMigDeviceCount()
	if ret != nvml.SUCCESS {
		return "", fmt.Errorf("max mig device count: %w", ret)
	}
	for i := range n {
		mig, ret := dev.GetMigDeviceHandleByIndex(i)
		if ret != nvml.SUCCESS {
			continue
		}
		g, r1 := mig.GetGpuInstanceId()
		c, r2 := mig.GetComputeInstanceId()
		if r1 == nvml.SUCCESS && r2 == nvml.SUCCESS && g == giID && c == ciID {
			uuid, ret := mig.GetUUID()
			if ret != nvml.SUCCESS {
				return "", fmt.Errorf("mig device uuid: %w", ret)
			}
			return uuid, nil
		}
	}
	return "", errors.New("no mig device for the new instance")
}

// caps reads the access capabilities of a GPU and compute instance from
// driver/nvidia-caps/mig-minors ("gpu0/gi3/access 30") and the nvidia-caps
// major from devices.
func (m *MIGManager) caps(minor, gi, ci int) ([]CapDevice, error) {
	devs, err := readBounded(filepath.Join(m.procRoot, "devices"))
	if err != nil {
		return nil, fmt.Errorf("read /proc/devices: %w", err)
	}
	major := charDeviceMajor(devs, "nvidia-caps")
	if major == 0 {
		return nil, errors.New("no nvidia-caps device in /proc/devices")
	}
	data, err := readBounded(filepath.Join(m.procRoot, "driver", "nvidia-caps", "mig-minors"))
	if err != nil {
		return nil, fmt.Errorf("read mig-minors: %w", err)
	}
	want := []string{fmt.Sprintf("gpu%d/gi%d/access", minor, gi), fmt.Sprintf("gpu%d/gi%d/ci%d/access", minor, gi, ci)}
	found := map[string]int{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		name, num, ok := strings.Cut(strings.TrimSpace(sc.Text()), " ")
		if n, err := strconv.Atoi(strings.TrimSpace(num)); ok && err == nil && n > 0 && n < 1<<20 {
			found[name] = n
		}
	}
	out := make([]CapDevice, 0, len(want))
	for _, w := range want {
		n, ok := found[w]
		if !ok {
			return nil, fmt.Errorf("mig-minors has no %s", w)
		}
		out = append(out, CapDevice{Path: fmt.Sprintf("/dev/nvidia-caps/nvidia-cap%d", n), Major: major, Minor: n})
	}
	return out, nil
}
