package checkpoint

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/types"
)

func sample() *Checkpoint {
	cp := New("node-a")
	devs := []Device{
		{Request: "gpus", Pool: "node-a", Device: "gpu-0", CDIDeviceIDs: []string{"gpufabric.dev/claim=u1-gpu-0"}},
		{Request: "fabric", Pool: "fabric-domain.x.1", Device: "channel-2"},
	}
	cp.Claims["u1"] = &Claim{
		UID: "u1", Namespace: "ns", Name: "c1", State: StatePrepareCompleted, BootID: "boot-1",
		Fingerprint: Fingerprint(devs), Devices: devs,
		UpdatedAt: time.Date(2026, 11, 3, 10, 0, 0, 0, time.UTC),
	}
	return cp
}

func TestSaveLoadRoundTrip(t *testing.T) {
	f := NewFile(filepath.Join(t.TempDir(), FileName), true)
	want := sample()
	if err := f.Save(want); err != nil {
		t.Fatal(err)
	}
	got, err := f.Load("node-a")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("round trip (-want +got):\n%s", diff)
	}
}

func TestLoadMissingIsEmpty(t *testing.T) {
	got, err := NewFile(filepath.Join(t.TempDir(), FileName), false).Load("node-a")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(New("node-a"), got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestLoadCorrupt(t *testing.T) {
	good, err := Encode(sample())
	if err != nil {
		t.Fatal(err)
	}
	tests := map[string][]byte{
		"empty":           {},
		"garbage":         []byte("\x00\x01garbage"),
		"truncated":       good[:len(good)/2],
		"bad checksum":    []byte(strings.Replace(string(good), `"c1"`, `"c2"`, 1)),
		"unknown version": []byte(strings.Replace(string(good), `"version": 2`, `"version": 3`, 1)),
		"no version":      []byte(`{"claims":{}}`),
		"key mismatch":    mustEncode(t, &Checkpoint{Claims: map[types.UID]*Claim{"a": {UID: "b", State: StatePrepareStarted}}}),
		"unknown state":   mustEncode(t, &Checkpoint{Claims: map[types.UID]*Claim{"a": {UID: "a", State: "Weird"}}}),
	}
	for name, data := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := Decode(data)
			if !errors.Is(err, ErrCorrupt) {
				t.Errorf("Decode error = %v, want ErrCorrupt", err)
			}
		})
	}
}

func mustEncode(t *testing.T, cp *Checkpoint) []byte {
	t.Helper()
	b, err := Encode(cp)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestReadErrorIsNotCorrupt(t *testing.T) {
	dir := t.TempDir()
	// A directory where the file should be cannot be read: an I/O error,
	// which must not be mistaken for corruption.
	if err := os.Mkdir(filepath.Join(dir, FileName), 0o755); err != nil {
		t.Fatal(err)
	}
	_, err := NewFile(filepath.Join(dir, FileName), false).Load("n")
	if err == nil || errors.Is(err, ErrCorrupt) {
		t.Errorf("Load error = %v, want a non-corruption error", err)
	}
}

func TestLoadV1(t *testing.T) {
	f := NewFile(filepath.Join("testdata", "checkpoint-v1.json"), false)
	got, err := f.Load("node-a")
	if err != nil {
		t.Fatal(err)
	}
	const u1 = "0b7a3c2e-5d1f-4a8b-9c6e-2f4d8a1b3c5e"
	devs := []Device{
		{Request: "gpus", Pool: "node-a", Device: "gpu-0", CDIDeviceIDs: []string{"gpufabric.dev/claim=" + u1 + "-gpu-0"}},
		{Request: "gpus", Pool: "node-a", Device: "gpu-1", CDIDeviceIDs: []string{"gpufabric.dev/claim=" + u1 + "-gpu-1"}},
		{Request: "nics", Pool: "node-a", Device: "nic-mlx5-0", CDIDeviceIDs: []string{"gpufabric.dev/claim=" + u1 + "-nic-mlx5-0"}},
	}
	want := &Claim{UID: u1, Namespace: "team-a", Name: "train-gpus", State: StatePrepareCompleted, Devices: devs, Fingerprint: Fingerprint(devs)}
	if diff := cmp.Diff(want, got.Claims[u1]); diff != "" {
		t.Errorf("migrated claim (-want +got):\n%s", diff)
	}
	if len(got.Claims) != 2 {
		t.Errorf("got %d claims, want 2", len(got.Claims))
	}
	// Saving writes the current version.
	out := NewFile(filepath.Join(t.TempDir(), FileName), false)
	if err := out.Save(got); err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(out.Path())
	if !strings.Contains(string(data), `"version": 2`) {
		t.Errorf("saved file is not version 2:\n%s", data)
	}
}

func TestMoveAside(t *testing.T) {
	dir := t.TempDir()
	f := NewFile(filepath.Join(dir, FileName), true)
	if err := os.WriteFile(f.Path(), []byte("junk"), 0o600); err != nil {
		t.Fatal(err)
	}
	to, err := f.MoveAside(time.Date(2026, 11, 3, 10, 0, 0, 5, time.UTC))
	if err != nil {
		t.Fatal(err)
	}
	if want := f.Path() + ".corrupt-20261103T100000.000000005Z"; to != want {
		t.Errorf("moved to %q, want %q", to, want)
	}
	if _, err := os.Stat(f.Path()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("checkpoint still present: %v", err)
	}
}

func TestFingerprintOrderIndependent(t *testing.T) {
	a := Device{Request: "r", Pool: "p", Device: "gpu-0"}
	b := Device{Request: "r", Pool: "p", Device: "gpu-1"}
	if Fingerprint([]Device{a, b}) != Fingerprint([]Device{b, a}) {
		t.Error("fingerprint depends on order")
	}
	if Fingerprint([]Device{a}) == Fingerprint([]Device{b}) {
		t.Error("different devices, same fingerprint")
	}
}

func TestHolders(t *testing.T) {
	cp := sample()
	cp.Claims["u2"] = &Claim{UID: "u2", State: StatePrepareStarted, Devices: []Device{
		{Pool: "node-a", Device: "gpu-1"}, {Pool: "node-a", Device: "gpu-2", AdminAccess: true},
	}}
	want := map[string]types.UID{
		"node-a/gpu-0": "u1", "fabric-domain.x.1/channel-2": "u1", "node-a/gpu-1": "u2",
	}
	got := map[string]types.UID{}
	for k, c := range cp.Holders() {
		got[k] = c.UID
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestFingerprintConfigEnv(t *testing.T) {
	a := Device{Request: "r", Pool: "p", Device: "gpu-0"}
	b := a
	b.ConfigEnv = []string{"NCCL_DEBUG=INFO"}
	c := a
	c.ConfigEnv = []string{"NCCL_DEBUG=WARN"}
	const before = "e68003c7a6f8dfa1" // Fingerprint([]Device{a}) before config variables existed
	if got := Fingerprint([]Device{a}); got != before {
		t.Errorf("fingerprint without config env changed: %s, want %s", got, before)
	}
	if Fingerprint([]Device{a}) == Fingerprint([]Device{b}) || Fingerprint([]Device{b}) == Fingerprint([]Device{c}) {
		t.Error("config variables do not change the fingerprint")
	}
}
