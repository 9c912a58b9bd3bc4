package devices

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpufabric/gpufabric/pkg/topology"
)

// HealthPolicy turns GPU events into device taints.
type HealthPolicy struct {
	// FatalXIDs break the job running on the GPU (and so its gang): their
	// taint has FatalEffect.
	FatalXIDs map[uint64]bool
	// IgnoredXIDs are application errors that leave the GPU healthy: no
	// taint. Every other Xid taints NoSchedule.
	IgnoredXIDs map[uint64]bool
	// FatalEffect is NoExecute (running pods are evicted, so the gang is
	// rescheduled whole) or NoSchedule.
	FatalEffect resourceapi.DeviceTaintEffect
}

// DefaultFatalXIDs are the Xids after which the GPU cannot go on running
// the job and needs a reset (NVIDIA's Xid catalog): 48 double-bit ECC, 64
// row remapper failure, 74 NVLink error, 79 fallen off the bus, 94/95
// contained/uncontained ECC, 119/120 GSP timeout/error, 140 unrecovered
// ECC.
func DefaultFatalXIDs() []uint64 { return []uint64{48, 64, 74, 79, 94, 95, 119, 120, 140} }

// DefaultIgnoredXIDs are application errors (as NVIDIA's device plugin
// skips them): 13 graphics engine exception, 31 memory page fault, 43 GPU
// stopped processing, 45 preemptive cleanup, 68 video processor exception,
// 109 context switch timeout.
func DefaultIgnoredXIDs() []uint64 { return []uint64{13, 31, 43, 45, 68, 109} }

// DefaultHealthPolicy is the default lists with NoExecute.
func DefaultHealthPolicy() HealthPolicy {
	return HealthPolicy{
		FatalXIDs:   xidSet(DefaultFatalXIDs()),
		IgnoredXIDs: xidSet(DefaultIgnoredXIDs()),
		FatalEffect: resourceapi.DeviceTaintEffectNoExecute,
	}
}

func xidSet(xids []uint64) map[uint64]bool {
	m := make(map[uint64]bool, len(xids))
	for _, x := range xids {
		m[x] = true
	}
	return m
}

// ParseXIDs reads a comma-separated Xid list ("48,79"); empty is none.
func ParseXIDs(s string) (map[uint64]bool, error) {
	out := map[uint64]bool{}
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		x, err := strconv.ParseUint(f, 10, 16)
		if err != nil || x == 0 {
			return nil, fmt.Errorf("xid %q: must be a number in 1..65535", f)
		}
		out[x] = true
	}
	return out, nil
}

// FormatXIDs is the inverse of ParseXIDs, sorted.
func FormatXIDs(m map[uint64]bool) string {
	var parts []string
	for _, x := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, strconv.FormatUint(x, 10))
	}
	return strings.Join(parts, ",")
}

// Taint returns the taint an event puts on its GPU, or false for none:
//   - Xid: ignored ones none; fatal ones gpufabric.dev/xid=<xid> with
//     FatalEffect; any other NoSchedule;
//   - double-bit ECC: gpufabric.dev/ecc=double-bit with FatalEffect;
//     single-bit (corrected) ECC: none;
//   - GPU lost: gpufabric.dev/gpu-lost with FatalEffect.
//
// An event without a GPU UUID applies to every GPU (see EventTaints.Record),
// so its effect is at most NoSchedule: one unknown GPU never evicts the
// whole node. TimeAdded is the event's time.
func (p HealthPolicy) Taint(ev Event) (resourceapi.DeviceTaint, bool) {
	t := resourceapi.DeviceTaint{TimeAdded: &metav1.Time{Time: ev.Time.UTC().Truncate(1e9)}}
	switch ev.Kind {
	case EventXID:
		if p.IgnoredXIDs[ev.XID] {
			return resourceapi.DeviceTaint{}, false
		}
		t.Key, t.Value, t.Effect = topology.TaintXID, strconv.FormatUint(ev.XID, 10), resourceapi.DeviceTaintEffectNoSchedule
		if p.FatalXIDs[ev.XID] {
			t.Effect = p.FatalEffect
		}
	case EventDoubleBitECC:
		t.Key, t.Value, t.Effect = topology.TaintECC, "double-bit", p.FatalEffect
	case EventGPULost:
		t.Key, t.Value, t.Effect = topology.TaintGPULost, "lost", p.FatalEffect
	default:
		return resourceapi.DeviceTaint{}, false
	}
	if ev.UUID == "" && t.Effect == resourceapi.DeviceTaintEffectNoExecute {
		t.Effect = resourceapi.DeviceTaintEffectNoSchedule
	}
	return t, true
}

// severity orders taint effects: a taint is replaced only by one at least
// as severe.
func severity(e resourceapi.DeviceTaintEffect) int {
	switch e {
	case resourceapi.DeviceTaintEffectNoExecute:
		return 2
	case resourceapi.DeviceTaintEffectNoSchedule:
		return 1
	}
	return 0
}
