package node

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/gpufabric/gpufabric/pkg/claims"
	"github.com/gpufabric/gpufabric/pkg/claims/checkpoint"
)

func TestRestartThenUnprepare(t *testing.T) {
	e := newEnv(t)
	d1 := e.driver()
	a := newClaim("a").gpus("gpus", 0, 1).channel("fabric", testDomain, 1).obj()
	b := newClaim("b").gpus("gpus", 2).obj()
	first := mustPrepare(t, e.ctx, d1, a, b)
	if err := d1.Close(); err != nil {
		t.Fatal(err)
	}
	d2 := e.driver()
	again := mustPrepare(t, e.ctx, d2, a)
	if diff := cmp.Diff(first[a.UID], again[a.UID]); diff != "" {
		t.Errorf("prepare after restart (-before +after):\n%s", diff)
	}
	if got := unprepare(t, e.ctx, d2, a, b); got[a.UID] != nil || got[b.UID] != nil {
		t.Fatalf("unprepare after restart: %v", got)
	}
	if e.specExists(a.UID) || e.specExists(b.UID) || len(e.loadCheckpoint().Claims) != 0 {
		t.Error("state left after unprepare")
	}
	if reasons := e.eventReasons(); len(reasons) != 0 {
		t.Errorf("a clean restart emitted events: %v", reasons)
	}
}

func TestCorruptCheckpointRebuiltFromCDISpecs(t *testing.T) {
	tests := map[string]func(good []byte) []byte{
		"garbage":      func([]byte) []byte { return []byte("\x7fELF garbage") },
		"empty":        func([]byte) []byte { return nil },
		"truncated":    func(good []byte) []byte { return good[:len(good)*2/3] },
		"bad checksum": func(good []byte) []byte { return flipInData(t, good) },
	}
	for name, corrupt := range tests {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t)
			d1 := e.driver()
			a := newClaim("a").gpus("gpus", 0, 1).nics("nics", "mlx5_0").obj()
			b := newClaim("b").gpus("gpus", 2).channel("fabric", testDomain, 1).obj()
			first := mustPrepare(t, e.ctx, d1, a, b)
			_ = d1.Close()
			good, err := os.ReadFile(e.checkpointPath())
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(e.checkpointPath(), corrupt(good), 0o600); err != nil {
				t.Fatal(err)
			}

			d2 := e.driver()
			moved, _ := filepath.Glob(e.checkpointPath() + ".corrupt-*")
			if len(moved) != 1 {
				t.Errorf("moved-aside files: %v, want one", moved)
			}
			if got := metricValue(t, d2.metrics.corruptions); got != 1 {
				t.Errorf("corruption counter = %v, want 1", got)
			}
			if !slices.Contains(e.eventReasons(), ReasonCheckpointCorrupt) {
				t.Errorf("events %v lack %s", e.eventReasons(), ReasonCheckpointCorrupt)
			}
			// The rebuilt state knows both claims.
			again := mustPrepare(t, e.ctx, d2, a)
			if diff := cmp.Diff(first[a.UID], again[a.UID]); diff != "" {
				t.Errorf("prepare after rebuild (-before +after):\n%s", diff)
			}
			res := prepare(t, e.ctx, d2, newClaim("c").gpus("gpus", 2).obj())
			if err := res["uid-c"].Err; !errors.Is(err, ErrDoubleBooked) {
				t.Errorf("claim on b's gpu after rebuild: %v, want ErrDoubleBooked", err)
			}
			if got := unprepare(t, e.ctx, d2, b); got[b.UID] != nil || e.specExists(b.UID) {
				t.Errorf("unprepare after rebuild: err=%v, spec exists=%v", got[b.UID], e.specExists(b.UID))
			}
			if _, err := checkpoint.NewFile(e.checkpointPath(), false).Load(testNode); err != nil {
				t.Errorf("checkpoint after rebuild: %v", err)
			}
		})
	}
}

// flipInData changes the checkpoint content without fixing its checksum.
func flipInData(t *testing.T, good []byte) []byte {
	t.Helper()
	out := slices.Clone(good)
	i := slices.Index(out, 'g') // in "gpus" or "gpu-0" inside data
	if i < 0 {
		t.Fatal("no byte to flip")
	}
	out[i] = 'G'
	return out
}

func TestCorruptCheckpointDropsStaleClaims(t *testing.T) {
	e := newEnv(t)
	a := newClaim("a").gpus("gpus", 0).obj()
	b := newClaim("b").gpus("gpus", 1).obj()
	replaced := newClaim("c").gpus("gpus", 2).obj()
	mustPrepare(t, e.ctx, e.driver(), a, b, replaced)
	if err := os.WriteFile(e.checkpointPath(), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	e.getter = claims.ClaimGetterFunc(func(_ context.Context, ns, name string) (*resourceapi.ResourceClaim, error) {
		switch name {
		case "a":
			return a, nil
		case "c":
			return newClaim("c-new").obj(), nil // same name, new UID
		}
		return nil, apierrors.NewNotFound(schema.GroupResource{Group: "resource.k8s.io", Resource: "resourceclaims"}, name)
	})
	e.driver()
	if !e.specExists(a.UID) || e.specExists(b.UID) || e.specExists(replaced.UID) {
		t.Errorf("specs: a=%v (want true) b=%v c=%v (want false)", e.specExists(a.UID), e.specExists(b.UID), e.specExists(replaced.UID))
	}
	var got []string
	for uid := range e.loadCheckpoint().Claims {
		got = append(got, string(uid))
	}
	if diff := cmp.Diff([]string{"uid-a"}, got); diff != "" {
		t.Errorf("claims (-want +got):\n%s", diff)
	}
}

func TestRebootRedoesClaims(t *testing.T) {
	e := newEnv(t)
	a := newClaim("a").gpus("gpus", 0).nics("nics", "mlx5_0").obj()
	gone := newClaim("gone").gpus("gpus", 1).obj()
	first := mustPrepare(t, e.ctx, e.driver(), a, gone)
	// Reboot: new boot id, /var/run/cdi (tmpfs) is empty, gpu-1 fell off the bus.
	e.setBootID("boot-2")
	if err := os.RemoveAll(e.cdiRoot); err != nil {
		t.Fatal(err)
	}
	e.resolver.remove("gpu-1")
	d := e.driver()
	if !e.specExists(a.UID) {
		t.Error("claim a was not redone after the reboot")
	}
	if e.specExists(gone.UID) {
		t.Error("claim on the vanished gpu kept a spec")
	}
	cp := e.loadCheckpoint()
	if c := cp.Claims[a.UID]; c == nil || c.BootID != "boot-2" || c.State != checkpoint.StatePrepareCompleted {
		t.Errorf("claim a entry = %+v, want completed in boot-2", c)
	}
	if _, ok := cp.Claims[gone.UID]; ok {
		t.Error("claim on the vanished gpu is still checkpointed")
	}
	wantEvents := []string{ReasonClaimRedone, ReasonClaimRolledBack}
	if diff := cmp.Diff(wantEvents, e.eventReasons()); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
	again := mustPrepare(t, e.ctx, d, a)
	if diff := cmp.Diff(first[a.UID], again[a.UID]); diff != "" {
		t.Errorf("(-before +after):\n%s", diff)
	}
	res := prepare(t, e.ctx, d, gone)
	if !errors.Is(res[gone.UID].Err, claims.ErrUnknownDevice) {
		t.Errorf("re-prepare on vanished gpu: %v, want ErrUnknownDevice", res[gone.UID].Err)
	}
}

func TestStartedEntryRedoneOrRolledBack(t *testing.T) {
	e := newEnv(t)
	a := newClaim("a").gpus("gpus", 0).obj()
	b := newClaim("b").gpus("gpus", 3).obj()
	mustPrepare(t, e.ctx, e.driver(), a, b)
	// Simulate a crash after the Started write: both entries Started, no
	// spec files; b's device cannot be resolved any more.
	f := checkpoint.NewFile(e.checkpointPath(), false)
	cp := e.loadCheckpoint()
	for _, c := range cp.Claims {
		c.State = checkpoint.StatePrepareStarted
	}
	if err := f.Save(cp); err != nil {
		t.Fatal(err)
	}
	for _, rc := range []*resourceapi.ResourceClaim{a, b} {
		if err := os.Remove(e.specPath(rc.UID)); err != nil {
			t.Fatal(err)
		}
	}
	e.resolver.remove("gpu-3")
	d := e.driver()
	cp = e.loadCheckpoint()
	if c := cp.Claims[a.UID]; c == nil || c.State != checkpoint.StatePrepareCompleted || !e.specExists(a.UID) {
		t.Errorf("a = %+v, spec exists %v; want redone", c, e.specExists(a.UID))
	}
	if _, ok := cp.Claims[b.UID]; ok || e.specExists(b.UID) {
		t.Error("b was not rolled back")
	}
	if got := metricValue(t, d.metrics.recovered.WithLabelValues("redone")); got != 1 {
		t.Errorf("redone counter = %v, want 1", got)
	}
	if got := metricValue(t, d.metrics.recovered.WithLabelValues("rolled_back")); got != 1 {
		t.Errorf("rolled back counter = %v, want 1", got)
	}
}

func TestV1CheckpointLoads(t *testing.T) {
	e := newEnv(t)
	v1, err := os.ReadFile(filepath.Join("..", "checkpoint", "testdata", "checkpoint-v1.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(e.stateDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(e.checkpointPath(), v1, 0o600); err != nil {
		t.Fatal(err)
	}
	e.driver(func(c *Config) { c.PoolName = "node-a" })
	const u1, u2 = "0b7a3c2e-5d1f-4a8b-9c6e-2f4d8a1b3c5e", "9d2e4f6a-8b0c-4d1e-a3f5-7b9c1d3e5f7a"
	for _, uid := range []string{u1, u2} {
		if !e.specExists(typesUID(uid)) {
			t.Errorf("claim %s from the v1 checkpoint has no CDI spec", uid)
		}
	}
	data, _ := os.ReadFile(e.checkpointPath())
	if !containsAll(string(data), `"version": 2`, "boot-1") {
		t.Errorf("checkpoint not migrated to v2 with boot id:\n%s", data)
	}
	d := e.driver()
	res := prepare(t, e.ctx, d, newClaim("x").gpus("gpus", 3).obj())
	if !errors.Is(res["uid-x"].Err, ErrDoubleBooked) {
		t.Errorf("gpu-3 held by a migrated claim: got %v, want ErrDoubleBooked", res["uid-x"].Err)
	}
}

func TestOrphanSpecRemovedAtStart(t *testing.T) {
	e := newEnv(t)
	a := newClaim("a").gpus("gpus", 0).obj()
	b := newClaim("b").gpus("gpus", 1).obj()
	d1 := e.driver()
	mustPrepare(t, e.ctx, d1, a, b)
	_ = d1.Close()
	// Crash between writing the checkpoint without b and removing b's spec.
	cp := e.loadCheckpoint()
	delete(cp.Claims, b.UID)
	if err := checkpoint.NewFile(e.checkpointPath(), false).Save(cp); err != nil {
		t.Fatal(err)
	}
	stale := filepath.Join(e.cdiRoot, ".gpufabric.dev-claim_x.json.123.tmp")
	if err := os.WriteFile(stale, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	e.driver()
	if !e.specExists(a.UID) || e.specExists(b.UID) {
		t.Errorf("a exists=%v (want true), orphan b exists=%v (want false)", e.specExists(a.UID), e.specExists(b.UID))
	}
	if _, err := os.Stat(stale); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("stale temporary file not removed: %v", err)
	}
}

// breakDir replaces a directory by a regular file, so that writes into it
// fail even for root; the returned function restores it.
func breakDir(t *testing.T, dir string) func() {
	t.Helper()
	aside := dir + ".aside"
	if err := os.Rename(dir, aside); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	return func() {
		if err := os.Remove(dir); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(aside, dir); err != nil {
			t.Fatal(err)
		}
	}
}

func TestWriteFailures(t *testing.T) {
	tests := []struct {
		name    string
		dir     func(e *env) string
		wantErr error
	}{
		{name: "cdi root unwritable", dir: func(e *env) string { return e.cdiRoot }, wantErr: ErrCDI},
		{name: "state dir unwritable", dir: func(e *env) string { return e.stateDir }, wantErr: ErrCheckpoint},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			d := e.driver()
			a := newClaim("a").gpus("gpus", 0).obj()
			restore := breakDir(t, tc.dir(e))
			res := prepare(t, e.ctx, d, a, newClaim("b").unallocated().obj())
			if !errors.Is(res[a.UID].Err, tc.wantErr) {
				t.Errorf("prepare error = %v, want %v", res[a.UID].Err, tc.wantErr)
			}
			got := unprepare(t, e.ctx, d, a)
			if tc.wantErr == ErrCheckpoint && !errors.Is(got[a.UID], ErrCheckpoint) {
				t.Errorf("unprepare error = %v, want ErrCheckpoint", got[a.UID])
			}
			restore()
			// Nothing is held: the claim (or another one on its GPU) prepares now.
			mustPrepare(t, e.ctx, d, newClaim("c").gpus("gpus", 0).obj())
			if len(e.loadCheckpoint().Claims) != 1 {
				t.Errorf("checkpoint claims = %v, want only c", e.loadCheckpoint().Claims)
			}
		})
	}
}
