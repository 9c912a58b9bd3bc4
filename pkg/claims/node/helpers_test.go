package node

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2/ktesting"

	"github.com/gpufabric/gpufabric/pkg/claims"
	"github.com/gpufabric/gpufabric/pkg/claims/checkpoint"
	"github.com/gpufabric/gpufabric/pkg/topology"
)

const testNode = "node-a"

// testDomain is a multi-node NVLink domain id.
var testDomain = topology.MNNVLDomainID("0f2c1f6a-0000-4000-8000-000000000001", 7)

// fakeResolver knows gpu-0…7 and nic-mlx5_0…7 of a DGX-like node.
type fakeResolver struct {
	mu      sync.Mutex
	devices map[string]claims.Edits
}

func newFakeResolver() *fakeResolver {
	r := &fakeResolver{devices: map[string]claims.Edits{}}
	for i := range 8 {
		r.devices[topology.GPUDeviceName(i)] = claims.Edits{
			GPUUUID: fmt.Sprintf("GPU-00000000-0000-0000-0000-00000000000%d", i),
			DeviceNodes: []claims.DeviceNode{
				{Path: fmt.Sprintf("/dev/nvidia%d", i)}, {Path: "/dev/nvidiactl"}, {Path: "/dev/nvidia-uvm"},
			},
		}
		ib := fmt.Sprintf("mlx5_%d", i)
		r.devices[topology.NICDeviceName(ib)] = claims.Edits{
			IBDevice: ib,
			DeviceNodes: []claims.DeviceNode{
				{Path: fmt.Sprintf("/dev/infiniband/uverbs%d", i)}, {Path: "/dev/infiniband/rdma_cm"},
			},
		}
	}
	return r
}

func (r *fakeResolver) ContainerEdits(name string) (claims.Edits, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := r.devices[name]
	if !ok {
		return claims.Edits{}, fmt.Errorf("%s: %w", name, claims.ErrUnknownDevice)
	}
	return e, nil
}

func (r *fakeResolver) remove(name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.devices, name)
}

// env is one node's directories, shared by the drivers a test starts.
type env struct {
	t        testing.TB
	ctx      context.Context
	cdiRoot  string
	stateDir string
	bootPath string
	devRoot  string
	resolver *fakeResolver
	getter   claims.ClaimGetter
	noSync   bool
	// imexReady is what the IMEX daemon answers; imexAsked counts asks.
	imexReady atomic.Bool
	imexAsked atomic.Int32

	mu     sync.Mutex
	events []Event
}

func newEnv(t testing.TB) *env {
	_, ctx := ktesting.NewTestContext(t)
	dir := t.TempDir()
	e := &env{
		t: t, ctx: ctx, resolver: newFakeResolver(),
		cdiRoot: filepath.Join(dir, "cdi"), stateDir: filepath.Join(dir, "state"),
		bootPath: filepath.Join(dir, "boot_id"), devRoot: filepath.Join(dir, "host"),
	}
	e.setBootID("boot-1")
	e.imexReady.Store(true)
	return e
}

func (e *env) setBootID(id string) {
	e.t.Helper()
	if err := os.WriteFile(e.bootPath, []byte(id+"\n"), 0o644); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) config() Config {
	return Config{
		NodeName: testNode, CDIRoot: e.cdiRoot, StateDir: e.stateDir, BootIDPath: e.bootPath,
		Resolver:    e.resolver,
		Channels:    claims.FabricChannelResolver{LocalDomainID: testDomain, IMEX: e.imex()},
		ClaimGetter: e.getter,
		Registry:    prometheus.NewRegistry(),
		OnEvent: func(_ context.Context, ev Event) {
			e.mu.Lock()
			defer e.mu.Unlock()
			e.events = append(e.events, ev)
		},
		DisableFsync: e.noSync,
	}
}

// imex is a driver with 16 IMEX channels whose daemon answers imexReady;
// a wait for it gives up after 200ms.
func (e *env) imex() *claims.IMEX {
	return &claims.IMEX{
		Major: 511, Channels: 16, ReadyTimeout: 200 * time.Millisecond, PollInterval: 10 * time.Millisecond,
		Ready: func(context.Context) (bool, string, error) {
			e.imexAsked.Add(1)
			if e.imexReady.Load() {
				return true, "READY", nil
			}
			return false, "NOT_READY", nil
		},
	}
}

// driver starts a Driver on the env's directories.
func (e *env) driver(mutate ...func(*Config)) *Driver {
	e.t.Helper()
	cfg := e.config()
	for _, m := range mutate {
		m(&cfg)
	}
	d, err := NewDriver(e.ctx, cfg)
	if err != nil {
		e.t.Fatalf("NewDriver: %v", err)
	}
	e.t.Cleanup(func() { _ = d.Close() })
	return d
}

func (e *env) eventReasons() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var r []string
	for _, ev := range e.events {
		r = append(r, ev.Reason)
	}
	return r
}

func (e *env) specPath(uid types.UID) string {
	return filepath.Join(e.cdiRoot, "gpufabric.dev-claim_"+string(uid)+".json")
}

func (e *env) specExists(uid types.UID) bool {
	_, err := os.Stat(e.specPath(uid))
	return err == nil
}

func (e *env) checkpointPath() string { return filepath.Join(e.stateDir, checkpoint.FileName) }

func (e *env) loadCheckpoint() *checkpoint.Checkpoint {
	e.t.Helper()
	cp, err := checkpoint.NewFile(e.checkpointPath(), false).Load(testNode)
	if err != nil {
		e.t.Fatal(err)
	}
	return cp
}

// claimBuilder builds allocated ResourceClaims.
type claimBuilder struct{ rc *resourceapi.ResourceClaim }

func newClaim(name string) *claimBuilder {
	return &claimBuilder{rc: &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID("uid-" + name)},
		Status:     resourceapi.ResourceClaimStatus{Allocation: &resourceapi.AllocationResult{}},
	}}
}

func (b *claimBuilder) result(request, driver, pool, device string) *claimBuilder {
	res := &b.rc.Status.Allocation.Devices.Results
	*res = append(*res, resourceapi.DeviceRequestAllocationResult{Request: request, Driver: driver, Pool: pool, Device: device})
	return b
}

func (b *claimBuilder) gpus(request string, minors ...int) *claimBuilder {
	for _, m := range minors {
		b.result(request, topology.DriverName, testNode, topology.GPUDeviceName(m))
	}
	return b
}

func (b *claimBuilder) nics(request string, ibdevs ...string) *claimBuilder {
	for _, ib := range ibdevs {
		b.result(request, topology.DriverName, testNode, topology.NICDeviceName(ib))
	}
	return b
}

func (b *claimBuilder) channel(request, domainID string, n int) *claimBuilder {
	return b.result(request, topology.DriverName, topology.FabricDomainPoolName(domainID), topology.ChannelDeviceName(n))
}

// adminAccess marks the last result as an admin access result.
func (b *claimBuilder) adminAccess() *claimBuilder {
	res := b.rc.Status.Allocation.Devices.Results
	yes := true
	res[len(res)-1].AdminAccess = &yes
	return b
}

func (b *claimBuilder) forPod(name string) *claimBuilder {
	b.rc.Status.ReservedFor = append(b.rc.Status.ReservedFor, resourceapi.ResourceClaimConsumerReference{
		Resource: "pods", Name: name, UID: types.UID("pod-uid-" + name),
	})
	return b
}

func (b *claimBuilder) forPodGroup(name string) *claimBuilder {
	b.rc.Status.ReservedFor = append(b.rc.Status.ReservedFor, resourceapi.ResourceClaimConsumerReference{
		APIGroup: "scheduling.k8s.io", Resource: "podgroups", Name: name, UID: types.UID("pg-uid-" + name),
	})
	return b
}

func (b *claimBuilder) unallocated() *claimBuilder {
	b.rc.Status.Allocation = nil
	return b
}

func (b *claimBuilder) obj() *resourceapi.ResourceClaim { return b.rc }

func objRef(rc *resourceapi.ResourceClaim) kubeletplugin.NamespacedObject {
	return kubeletplugin.NamespacedObject{
		NamespacedName: types.NamespacedName{Namespace: rc.Namespace, Name: rc.Name}, UID: rc.UID,
	}
}

// prepare prepares claims and fails the test on an overall error or a
// missing result.
func prepare(t testing.TB, ctx context.Context, d *Driver, rcs ...*resourceapi.ResourceClaim) map[types.UID]kubeletplugin.PrepareResult {
	t.Helper()
	res, err := d.PrepareResourceClaims(ctx, rcs)
	if err != nil {
		t.Fatalf("PrepareResourceClaims: %v", err)
	}
	for _, rc := range rcs {
		if _, ok := res[rc.UID]; !ok {
			t.Fatalf("no result for claim %s", rc.UID)
		}
	}
	return res
}

// mustPrepare prepares claims that must all succeed.
func mustPrepare(t testing.TB, ctx context.Context, d *Driver, rcs ...*resourceapi.ResourceClaim) map[types.UID]kubeletplugin.PrepareResult {
	t.Helper()
	res := prepare(t, ctx, d, rcs...)
	for uid, r := range res {
		if r.Err != nil {
			t.Fatalf("claim %s: %v", uid, r.Err)
		}
	}
	return res
}

func unprepare(t testing.TB, ctx context.Context, d *Driver, rcs ...*resourceapi.ResourceClaim) map[types.UID]error {
	t.Helper()
	refs := make([]kubeletplugin.NamespacedObject, 0, len(rcs))
	for _, rc := range rcs {
		refs = append(refs, objRef(rc))
	}
	res, err := d.UnprepareResourceClaims(ctx, refs)
	if err != nil {
		t.Fatalf("UnprepareResourceClaims: %v", err)
	}
	if len(res) != len(rcs) {
		t.Fatalf("got %d results for %d claims", len(res), len(rcs))
	}
	return res
}

func containsAll(s string, subs ...string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}

func typesUID(s string) types.UID { return types.UID(s) }

// metricValue reads a counter's or gauge's value, or a histogram's count.
func metricValue(t testing.TB, m prometheus.Metric) float64 {
	t.Helper()
	var pb dto.Metric
	if err := m.Write(&pb); err != nil {
		t.Fatal(err)
	}
	switch {
	case pb.Counter != nil:
		return pb.Counter.GetValue()
	case pb.Gauge != nil:
		return pb.Gauge.GetValue()
	case pb.Histogram != nil:
		return float64(pb.Histogram.GetSampleCount())
	}
	t.Fatalf("unsupported metric %v", m.Desc())
	return 0
}
