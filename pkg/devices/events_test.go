package devices_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"k8s.io/klog/v2/ktesting"

	"github.com/gpufabric/gpufabric/pkg/devices"
	"github.com/gpufabric/gpufabric/pkg/devices/mock"
)

const eventFabric = `nodeGroups:
- name: gb1
  gpus: {model: GB200}
  nvlink: {kind: mnnvl, clusterUUID: 5e0a7b3c-1d2f-4a6b-8c9d-e0f1a2b3c4d5, cliqueID: 1}
faults:
- node: gb1
  xid: {gpu: 2, xid: 79}
`

// TestWatchEvents watches a mock node's GPUs through the NVML event set:
// the Xid already in the fabric file arrives first, then an Xid and two
// ECC errors appended while watching, each with its GPU's UUID; the
// watcher stops when its context ends.
func TestWatchEvents(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "fabric.yaml")
	writeFabric(t, path, eventFabric)
	f, err := mock.LoadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b, err := f.Backend("gb1", filepath.Join(dir, "node"))
	if err != nil {
		t.Fatal(err)
	}
	inv, err := devices.Discover(ctx, b, "gb1")
	if err != nil {
		t.Fatal(err)
	}
	uuid := func(i int) string { return inv.GPUs[i].UUID }

	ctx, cancel := context.WithCancel(ctx)
	events := make(chan devices.Event, 8)
	done := make(chan error, 1)
	go func() { done <- devices.WatchEvents(ctx, b.NVML(), events) }()
	got := []devices.Event{receive(t, events)}
	writeFabric(t, path, eventFabric+"- node: gb1\n  xid: {gpu: 0, xid: 48}\n- node: gb1\n  ecc: {gpu: 1}\n- node: gb1\n  ecc: {gpu: 3, type: SingleBit}\n")
	for range 3 {
		got = append(got, receive(t, events))
	}
	want := []devices.Event{
		{UUID: uuid(2), Kind: devices.EventXID, XID: 79},
		{UUID: uuid(0), Kind: devices.EventXID, XID: 48},
		{UUID: uuid(1), Kind: devices.EventDoubleBitECC},
		{UUID: uuid(3), Kind: devices.EventSingleBitECC},
	}
	if diff := cmp.Diff(want, got, cmpopts.IgnoreFields(devices.Event{}, "Time")); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("WatchEvents returned %v after cancel, want nil", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("WatchEvents did not stop after cancel")
	}
}

func receive(t *testing.T, events <-chan devices.Event) devices.Event {
	t.Helper()
	select {
	case ev := <-events:
		if ev.Time.IsZero() {
			t.Errorf("event %+v has no time", ev)
		}
		return ev
	case <-time.After(10 * time.Second):
		t.Fatal("no event within 10s")
	}
	return devices.Event{}
}

// writeFabric replaces the file atomically, so that the mock never reads
// it half written.
func writeFabric(t *testing.T, path, content string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}
