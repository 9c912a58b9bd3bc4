package devices

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"syscall"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/gpufabric/gpufabric/pkg/internal/fsutil"
	"github.com/gpufabric/gpufabric/pkg/topology"
)

// EventTaintsFileName is the file in the plugin's state directory.
const EventTaintsFileName = "event-taints.json"

// maxEventTaintsFile bounds the file; beyond it the file is corrupt.
const maxEventTaintsFile = 1 << 20

// ErrCorruptEventTaints marks a file that is not what EventTaints writes.
var ErrCorruptEventTaints = errors.New("corrupt event taints file")

// EventTaints keeps the taints that GPU events put on GPUs for the rest of
// the boot: an Xid 48 GPU answers NVML normally afterwards, so discovery
// alone would publish it healthy again after a plugin restart. A reboot
// (another boot id) resets the GPUs and so clears the taints; an operator
// who reset one GPU clears its taints with Clear ("kubelet-plugin health
// clear"). The file is the source of truth, shared by the plugin instances
// of a rolling update: every access holds a file lock.
type EventTaints struct {
	path, lockPath string
	bootID         string
	policy         HealthPolicy
	sync           bool
}

// eventTaintsFile is the file's content.
type eventTaintsFile struct {
	BootID string `json:"bootID"`
	// GPUs maps a GPU UUID to its event taints, one per key.
	GPUs map[string][]resourceapi.DeviceTaint `json:"gpus"`
}

// NewEventTaints returns the store in dir for this boot. sync=false skips
// fsync (tests).
func NewEventTaints(dir, bootID string, policy HealthPolicy, sync bool) *EventTaints {
	return &EventTaints{
		path: filepath.Join(dir, EventTaintsFileName), lockPath: filepath.Join(dir, EventTaintsFileName+".lock"),
		bootID: bootID, policy: policy, sync: sync,
	}
}

// Policy returns the store's health policy.
func (s *EventTaints) Policy() HealthPolicy { return s.policy }

// Record applies an event: the policy's taint goes on the event's GPU, or
// on every GPU of gpus when the event names none. A taint replaces an
// earlier one with the same key only if its effect is at least as severe
// (a later NoSchedule Xid never downgrades a NoExecute one). It reports
// whether anything changed.
func (s *EventTaints) Record(ev Event, gpus []string) (bool, error) {
	taint, ok := s.policy.Taint(ev)
	if !ok {
		return false, nil
	}
	targets := []string{ev.UUID}
	if ev.UUID == "" {
		targets = gpus
	}
	changed := false
	err := s.update(func(f *eventTaintsFile) {
		for _, uuid := range targets {
			if merged, ok := mergeTaint(f.GPUs[uuid], taint); ok {
				f.GPUs[uuid] = merged
				changed = true
			}
		}
	})
	return changed, err
}

// Clear drops the taints of the given GPUs, or of all GPUs when none is
// given, and returns how many GPUs had taints.
func (s *EventTaints) Clear(uuids ...string) (int, error) {
	n := 0
	err := s.update(func(f *eventTaintsFile) {
		for uuid := range f.GPUs {
			if len(uuids) == 0 || slices.Contains(uuids, uuid) {
				delete(f.GPUs, uuid)
				n++
			}
		}
	})
	return n, err
}

// Load returns the taints of this boot by GPU UUID. A file of another boot
// counts as empty; a corrupt one is reported (wrapping
// ErrCorruptEventTaints) together with an empty map, and the next write
// replaces it.
func (s *EventTaints) Load() (map[string][]resourceapi.DeviceTaint, error) {
	var out map[string][]resourceapi.DeviceTaint
	err := s.locked(func() error {
		f, err := s.read()
		out = f.GPUs
		return err
	})
	return out, err
}

func (s *EventTaints) update(change func(*eventTaintsFile)) error {
	return s.locked(func() error {
		f, _ := s.read() // corrupt: start over, the error was reported by Load
		before, _ := json.Marshal(f)
		change(&f)
		after, err := json.Marshal(f)
		if err != nil {
			return fmt.Errorf("encode event taints: %w", err)
		}
		if bytes.Equal(before, after) {
			return nil
		}
		if err := fsutil.WriteFileAtomic(s.path, after, 0o600, s.sync, nil); err != nil {
			return fmt.Errorf("write event taints: %w", err)
		}
		return nil
	})
}

// read returns this boot's content: empty when the file is missing, of
// another boot, or corrupt (with the error).
func (s *EventTaints) read() (eventTaintsFile, error) {
	empty := eventTaintsFile{BootID: s.bootID, GPUs: map[string][]resourceapi.DeviceTaint{}}
	fh, err := os.Open(s.path)
	if errors.Is(err, fs.ErrNotExist) {
		return empty, nil
	}
	if err != nil {
		return empty, fmt.Errorf("read event taints: %w", err)
	}
	defer func() { _ = fh.Close() }()
	data, err := io.ReadAll(io.LimitReader(fh, maxEventTaintsFile+1))
	if err != nil {
		return empty, fmt.Errorf("read event taints: %w", err)
	}
	f, err := decodeEventTaints(data)
	if err != nil {
		return empty, fmt.Errorf("%s: %w: %w", s.path, ErrCorruptEventTaints, err)
	}
	if f.BootID != s.bootID {
		return empty, nil
	}
	return f, nil
}

// decodeEventTaints parses and checks the file strictly: what it holds
// goes into ResourceSlices.
func decodeEventTaints(data []byte) (eventTaintsFile, error) {
	var f eventTaintsFile
	if len(data) > maxEventTaintsFile {
		return f, fmt.Errorf("more than %d bytes", maxEventTaintsFile)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return f, err
	}
	if f.GPUs == nil {
		f.GPUs = map[string][]resourceapi.DeviceTaint{}
	}
	for uuid, taints := range f.GPUs {
		if uuid == "" || len(uuid) > 128 || len(taints) > 3 {
			return f, fmt.Errorf("gpu %q: bad uuid or too many taints", uuid)
		}
		for _, t := range taints {
			if err := checkEventTaint(t); err != nil {
				return f, fmt.Errorf("gpu %q: %w", uuid, err)
			}
		}
	}
	return f, nil
}

func checkEventTaint(t resourceapi.DeviceTaint) error {
	switch {
	case t.Key != topology.TaintXID && t.Key != topology.TaintECC && t.Key != topology.TaintGPULost:
		return fmt.Errorf("taint key %q is not an event taint", t.Key)
	case severity(t.Effect) == 0:
		return fmt.Errorf("taint %s: effect %q", t.Key, t.Effect)
	case len(validation.IsValidLabelValue(t.Value)) > 0:
		return fmt.Errorf("taint %s: value %q is not a label value", t.Key, t.Value)
	}
	return nil
}

// mergeTaint adds t to taints, replacing one with its key if t is at least
// as severe and different; it reports whether the list changed.
func mergeTaint(taints []resourceapi.DeviceTaint, t resourceapi.DeviceTaint) ([]resourceapi.DeviceTaint, bool) {
	for i, old := range taints {
		if old.Key != t.Key {
			continue
		}
		if severity(t.Effect) < severity(old.Effect) || old.Value == t.Value && old.Effect == t.Effect {
			return taints, false
		}
		out := slices.Clone(taints)
		out[i] = t
		return out, true
	}
	return append(slices.Clone(taints), t), true
}

// locked runs fn holding the file lock.
func (s *EventTaints) locked(fn func() error) error {
	lock, err := os.OpenFile(s.lockPath, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("open event taints lock: %w", err)
	}
	defer func() { _ = lock.Close() }()
	if err := flockRetry(lock); err != nil {
		return fmt.Errorf("lock event taints: %w", err)
	}
	return fn()
}

// flockRetry takes an exclusive lock, retrying when a signal interrupts.
func flockRetry(f *os.File) error {
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX)
		if !errors.Is(err, syscall.EINTR) {
			return err
		}
	}
}

// WithTaints returns a copy of inv whose GPUs carry, in addition to their
// own taints, those of byUUID (event taints). inv is not changed.
func (inv *Inventory) WithTaints(byUUID map[string][]resourceapi.DeviceTaint) *Inventory {
	if len(byUUID) == 0 {
		return inv
	}
	out := *inv
	out.GPUs = slices.Clone(inv.GPUs)
	for i := range out.GPUs {
		g := &out.GPUs[i]
		if extra := byUUID[g.UUID]; len(extra) > 0 {
			g.Taints = append(slices.Clone(g.Taints), extra...)
		}
	}
	return &out
}
