package node

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/gpufabric/gpufabric/pkg/claims"
	"github.com/gpufabric/gpufabric/pkg/claims/checkpoint"
	"github.com/gpufabric/gpufabric/pkg/topology"
)

// partitions is a fake MIG driver: devices named gpu-<n>-mig-* exist only
// while prepared.
type partitions struct {
	*fakeResolver
	mu         sync.Mutex
	live       map[string]bool
	creates    int
	failCreate string // device whose creation fails
	failRemove bool
}

var _ claims.DevicePreparer = (*partitions)(nil)

func newPartitions() *partitions {
	return &partitions{fakeResolver: newFakeResolver(), live: map[string]bool{}}
}

func (p *partitions) OnDemand(name string) bool { return strings.Contains(name, "-mig-") }

func (p *partitions) PrepareDevice(_ context.Context, name string) (claims.Edits, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if name == p.failCreate {
		return claims.Edits{}, errors.New("ERROR_INSUFFICIENT_RESOURCES")
	}
	if !p.live[name] {
		p.creates++
		p.live[name] = true
	}
	return claims.Edits{GPUUUID: "MIG-" + name, DeviceNodes: []claims.DeviceNode{
		{Path: "/dev/nvidia0"}, {Path: "/dev/nvidia-caps/nvidia-cap30", Type: "c", Major: 510, Minor: 30},
	}}, nil
}

func (p *partitions) UnprepareDevice(_ context.Context, name string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.failRemove {
		return errors.New("ERROR_IN_USE")
	}
	delete(p.live, name)
	return nil
}

func (p *partitions) alive() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return fmt.Sprint(slices.Sorted(maps.Keys(p.live)))
}

func migClaim(name string, devices ...string) *claimBuilder {
	b := newClaim(name)
	for _, d := range devices {
		b.result("mig", topology.DriverName, testNode, d)
	}
	return b
}

// TestOnDemandDevices: a MIG partition is made after the claim is
// Started, once per claim (idempotent prepare makes nothing), and destroyed
// at unprepare; a failed creation leaves nothing behind (the claim's other
// partitions destroyed, no entry, no spec); a failed destroy keeps the
// claim prepared so that the kubelet retries.
func TestOnDemandDevices(t *testing.T) {
	e := newEnv(t)
	parts := newPartitions()
	d := e.driver(func(c *Config) { c.Resolver = parts })
	a := migClaim("a", "gpu-0-mig-1g-10gb-0", "gpu-0-mig-1g-10gb-1").obj()
	mustPrepare(t, e.ctx, d, a)
	mustPrepare(t, e.ctx, d, a)
	if parts.creates != 2 || parts.alive() != "[gpu-0-mig-1g-10gb-0 gpu-0-mig-1g-10gb-1]" {
		t.Errorf("creates %d, live %s; want both partitions made once", parts.creates, parts.alive())
	}
	spec := readFile(t, e.specPath(a.UID))
	if !containsAll(spec, "NVIDIA_VISIBLE_DEVICES=MIG-gpu-0-mig-1g-10gb-0,MIG-gpu-0-mig-1g-10gb-1", `"path": "/dev/nvidia-caps/nvidia-cap30"`) {
		t.Errorf("spec lacks the MIG edits:\n%s", spec)
	}

	parts.failRemove = true
	if errs := unprepare(t, e.ctx, d, a); errs[a.UID] == nil || !e.specExists(a.UID) || e.loadCheckpoint().Claims[a.UID] == nil {
		t.Fatalf("failed destroy: err %v, spec %v; want an error and the claim still prepared", errs[a.UID], e.specExists(a.UID))
	}
	parts.failRemove = false
	if errs := unprepare(t, e.ctx, d, a); errs[a.UID] != nil || parts.alive() != "[]" || e.specExists(a.UID) {
		t.Fatalf("unprepare: %v, live %s", errs[a.UID], parts.alive())
	}

	b := migClaim("b", "gpu-1-mig-1g-10gb-0", "gpu-1-mig-3g-40gb-0").obj()
	parts.failCreate = "gpu-1-mig-3g-40gb-0"
	res := prepare(t, e.ctx, d, b)
	if err := res[b.UID].Err; err == nil || !strings.Contains(err.Error(), "ERROR_INSUFFICIENT_RESOURCES") {
		t.Errorf("failed creation: %v", err)
	}
	if parts.alive() != "[]" || e.specExists(b.UID) || e.loadCheckpoint().Claims[b.UID] != nil {
		t.Errorf("failed creation left live %s, spec %v", parts.alive(), e.specExists(b.UID))
	}

	admin := migClaim("admin", "gpu-2-mig-1g-10gb-0").adminAccess().obj()
	if err := prepare(t, e.ctx, d, admin)[admin.UID].Err; err == nil || !strings.Contains(err.Error(), "admin access") {
		t.Errorf("admin access to a partition: %v", err)
	}
}

// TestOnDemandRecovery: a claim found Started after a crash is redone
// (its partition found or made again); one that cannot be redone is rolled
// back and its partition destroyed.
func TestOnDemandRecovery(t *testing.T) {
	e := newEnv(t)
	parts := newPartitions()
	a := migClaim("a", "gpu-0-mig-1g-10gb-0").obj()
	b := migClaim("b", "gpu-1-mig-1g-10gb-0").obj()
	mustPrepare(t, e.ctx, e.driver(func(c *Config) { c.Resolver = parts }), a, b)
	cp := e.loadCheckpoint()
	for _, c := range cp.Claims {
		c.State = checkpoint.StatePrepareStarted
	}
	if err := checkpoint.NewFile(e.checkpointPath(), false).Save(cp); err != nil {
		t.Fatal(err)
	}
	for _, uid := range []string{"uid-a", "uid-b"} {
		if err := os.Remove(e.specPath(typesUID(uid))); err != nil {
			t.Fatal(err)
		}
	}
	parts.failCreate = "gpu-1-mig-1g-10gb-0"
	e.driver(func(c *Config) { c.Resolver = parts })
	cp = e.loadCheckpoint()
	if c := cp.Claims[a.UID]; c == nil || c.State != checkpoint.StatePrepareCompleted || !e.specExists(a.UID) {
		t.Errorf("a not redone: %+v", c)
	}
	if cp.Claims[b.UID] != nil || parts.alive() != "[gpu-0-mig-1g-10gb-0]" {
		t.Errorf("b not rolled back: entry %v, live %s", cp.Claims[b.UID], parts.alive())
	}
	if parts.creates != 2 {
		t.Errorf("creates = %d, want 2 (the redo found a's partition)", parts.creates)
	}
}

// TestDriverEditsInSpec: a claim with a GPU gets the driver's edits as the
// spec's own (and no NVIDIA_VISIBLE_DEVICES of its own); while they are
// unavailable GPU claims fail with ErrCDI naming the cause, and claims
// without GPUs are prepared.
func TestDriverEditsInSpec(t *testing.T) {
	e := newEnv(t)
	var broken atomic.Bool
	d := e.driver(func(c *Config) {
		c.DriverEdits = func(context.Context) (*cdispec.ContainerEdits, error) {
			if broken.Load() {
				return nil, errors.New("libcuda.so not found under /driver-root")
			}
			return nodeDriverEdits(), nil
		}
	})
	gpuClaim := newClaim("g").gpus("gpus", 0).obj()
	mustPrepare(t, e.ctx, d, gpuClaim)
	spec := readFile(t, e.specPath(gpuClaim.UID))
	if !containsAll(spec, `"hooks"`, "update-ldcache", "NVIDIA_VISIBLE_DEVICES=void", "GPUFABRIC_GPU_UUIDS=") || strings.Contains(spec, "NVIDIA_VISIBLE_DEVICES=GPU-") {
		t.Errorf("spec with driver edits:\n%s", spec)
	}
	broken.Store(true)
	g2, n := newClaim("g2").gpus("gpus", 1).obj(), newClaim("n").nics("nics", "mlx5_0").obj()
	res := prepare(t, e.ctx, d, g2, n)
	if err := res[g2.UID].Err; !errors.Is(err, ErrCDI) || !strings.Contains(err.Error(), "libcuda.so not found") {
		t.Errorf("GPU claim without driver files: %v", err)
	}
	if err := res[n.UID].Err; err != nil {
		t.Errorf("NIC claim: %v", err)
	}
}
