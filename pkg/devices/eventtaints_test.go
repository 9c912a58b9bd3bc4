package devices

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpufabric/gpufabric/pkg/topology"
)

var eventTime = time.Date(2026, 11, 23, 8, 0, 0, 0, time.UTC)

func taint(key, value string, effect resourceapi.DeviceTaintEffect) resourceapi.DeviceTaint {
	return resourceapi.DeviceTaint{Key: key, Value: value, Effect: effect, TimeAdded: &metav1.Time{Time: eventTime}}
}

func TestHealthPolicyTaint(t *testing.T) {
	const (
		noExec = resourceapi.DeviceTaintEffectNoExecute
		noSch  = resourceapi.DeviceTaintEffectNoSchedule
	)
	soft := DefaultHealthPolicy()
	soft.FatalEffect = noSch
	tests := []struct {
		name   string
		policy HealthPolicy
		ev     Event
		want   *resourceapi.DeviceTaint
	}{
		{name: "fatal xid evicts", policy: DefaultHealthPolicy(), ev: Event{UUID: "GPU-1", Kind: EventXID, XID: 79}, want: ptr(taint(topology.TaintXID, "79", noExec))},
		{name: "fatal xid with NoSchedule configured", policy: soft, ev: Event{UUID: "GPU-1", Kind: EventXID, XID: 48}, want: ptr(taint(topology.TaintXID, "48", noSch))},
		{name: "other xid keeps new pods away", policy: DefaultHealthPolicy(), ev: Event{UUID: "GPU-1", Kind: EventXID, XID: 63}, want: ptr(taint(topology.TaintXID, "63", noSch))},
		{name: "application xid is ignored", policy: DefaultHealthPolicy(), ev: Event{UUID: "GPU-1", Kind: EventXID, XID: 13}},
		{name: "double-bit ecc evicts", policy: DefaultHealthPolicy(), ev: Event{UUID: "GPU-1", Kind: EventDoubleBitECC}, want: ptr(taint(topology.TaintECC, "double-bit", noExec))},
		{name: "single-bit ecc is corrected", policy: DefaultHealthPolicy(), ev: Event{UUID: "GPU-1", Kind: EventSingleBitECC}},
		{name: "lost gpu evicts", policy: DefaultHealthPolicy(), ev: Event{UUID: "GPU-1", Kind: EventGPULost}, want: ptr(taint(topology.TaintGPULost, "lost", noExec))},
		{name: "unknown gpu never evicts", policy: DefaultHealthPolicy(), ev: Event{Kind: EventXID, XID: 79}, want: ptr(taint(topology.TaintXID, "79", noSch))},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.ev.Time = eventTime.Add(300 * time.Millisecond)
			got, ok := tc.policy.Taint(tc.ev)
			var gotp *resourceapi.DeviceTaint
			if ok {
				gotp = &got
			}
			if diff := cmp.Diff(tc.want, gotp); diff != "" {
				t.Errorf("taint (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseXIDs(t *testing.T) {
	got, err := ParseXIDs(" 79, 48,,13 ")
	if err != nil || FormatXIDs(got) != "13,48,79" {
		t.Errorf("ParseXIDs = %v, %v; want 13,48,79", got, err)
	}
	for _, bad := range []string{"x", "0", "-1", "70000", "1.5"} {
		if _, err := ParseXIDs(bad); err == nil {
			t.Errorf("ParseXIDs(%q) succeeded", bad)
		}
	}
}

// TestEventTaints checks the store's rules: per key the most severe taint
// stays, an event without a GPU goes to all GPUs, taints survive a new
// store (a plugin restart) in the same boot but not another boot, Clear
// drops them, and a corrupt file is reported and replaced.
func TestEventTaints(t *testing.T) {
	const noExec, noSch = resourceapi.DeviceTaintEffectNoExecute, resourceapi.DeviceTaintEffectNoSchedule
	dir := t.TempDir()
	s := NewEventTaints(dir, "boot-1", DefaultHealthPolicy(), false)
	record := func(ev Event) bool {
		t.Helper()
		ev.Time = eventTime
		changed, err := s.Record(ev, []string{"GPU-0", "GPU-1"})
		if err != nil {
			t.Fatal(err)
		}
		return changed
	}
	load := func(s *EventTaints) map[string][]resourceapi.DeviceTaint {
		t.Helper()
		m, err := s.Load()
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	steps := []struct {
		ev      Event
		changed bool
	}{
		{Event{UUID: "GPU-0", Kind: EventXID, XID: 63}, true},  // NoSchedule
		{Event{UUID: "GPU-0", Kind: EventXID, XID: 79}, true},  // NoExecute replaces it
		{Event{UUID: "GPU-0", Kind: EventXID, XID: 63}, false}, // never downgraded
		{Event{UUID: "GPU-0", Kind: EventXID, XID: 79}, false}, // same again
		{Event{UUID: "GPU-0", Kind: EventXID, XID: 13}, false}, // ignored
		{Event{UUID: "GPU-0", Kind: EventDoubleBitECC}, true},  // another key
		{Event{Kind: EventGPULost}, true},                      // all GPUs, NoSchedule
	}
	for i, st := range steps {
		if got := record(st.ev); got != st.changed {
			t.Errorf("step %d (%+v): changed = %v, want %v", i, st.ev, got, st.changed)
		}
	}
	want := map[string][]resourceapi.DeviceTaint{
		"GPU-0": {taint(topology.TaintXID, "79", noExec), taint(topology.TaintECC, "double-bit", noExec), taint(topology.TaintGPULost, "lost", noSch)},
		"GPU-1": {taint(topology.TaintGPULost, "lost", noSch)},
	}
	if diff := cmp.Diff(want, load(NewEventTaints(dir, "boot-1", DefaultHealthPolicy(), false))); diff != "" {
		t.Errorf("after a restart (-want +got):\n%s", diff)
	}
	if got := load(NewEventTaints(dir, "boot-2", DefaultHealthPolicy(), false)); len(got) != 0 {
		t.Errorf("after a reboot: %v, want none", got)
	}
	if n, err := s.Clear("GPU-1", "GPU-9"); err != nil || n != 1 {
		t.Errorf("Clear(GPU-1) = %d, %v; want 1", n, err)
	}
	if got := load(s); len(got) != 1 || got["GPU-0"] == nil {
		t.Errorf("after Clear(GPU-1): %v", got)
	}

	if err := os.WriteFile(filepath.Join(dir, EventTaintsFileName), []byte(`{"bootID":"boot-1","gpus":{"GPU-0":[{"key":"evil.example/x","effect":"NoExecute"}]}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Load(); !errors.Is(err, ErrCorruptEventTaints) || len(got) != 0 || !strings.Contains(err.Error(), "evil.example/x") {
		t.Errorf("foreign taint in the file: %v, %v; want none and ErrCorruptEventTaints naming the key", got, err)
	}
	record(Event{UUID: "GPU-1", Kind: EventXID, XID: 74})
	if got := load(s); len(got) != 1 || got["GPU-1"][0].Value != "74" {
		t.Errorf("after a write over the corrupt file: %v", got)
	}
}

// FuzzDecodeEventTaints: whatever the file holds, a decoded file has only
// event taint keys, known effects and label values, at most 3 per GPU.
func FuzzDecodeEventTaints(f *testing.F) {
	f.Add([]byte(`{"bootID":"b","gpus":{"GPU-0":[{"key":"gpufabric.dev/xid","value":"79","effect":"NoExecute"}]}}`))
	f.Add([]byte(`{"bootID":"b","gpus":null}`))
	f.Add([]byte(`{"gpus":{"":[]}}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, data []byte) {
		got, err := decodeEventTaints(data)
		if err != nil {
			return
		}
		for uuid, taints := range got.GPUs {
			if uuid == "" || len(taints) > 3 {
				t.Fatalf("accepted gpu %q with %d taints", uuid, len(taints))
			}
			for _, tt := range taints {
				if err := checkEventTaint(tt); err != nil {
					t.Fatalf("accepted bad taint: %v", err)
				}
			}
		}
	})
}

func TestWithTaints(t *testing.T) {
	inv := &Inventory{GPUs: []GPU{{UUID: "GPU-0"}, {UUID: "GPU-1", Taints: []resourceapi.DeviceTaint{{Key: "a"}}}}}
	got := inv.WithTaints(map[string][]resourceapi.DeviceTaint{"GPU-1": {{Key: "b"}}, "GPU-9": {{Key: "c"}}})
	if len(got.GPUs[0].Taints) != 0 || len(got.GPUs[1].Taints) != 2 || len(inv.GPUs[1].Taints) != 1 {
		t.Errorf("WithTaints: got %+v, original %+v", got.GPUs, inv.GPUs)
	}
}
