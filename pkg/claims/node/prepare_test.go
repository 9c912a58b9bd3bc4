package node

import (
	"errors"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	"github.com/gpufabric/gpufabric/pkg/claims"
	"github.com/gpufabric/gpufabric/pkg/claims/checkpoint"
	"github.com/gpufabric/gpufabric/pkg/topology"
)

var update = flag.Bool("update", false, "rewrite golden files")

func TestPrepareWritesCDISpec(t *testing.T) {
	tests := []struct {
		name   string
		claim  *resourceapi.ResourceClaim
		golden string
		want   kubeletplugin.PrepareResult
	}{
		{
			name: "gpus nics and a channel, reserved for a pod group",
			claim: newClaim("train").gpus("gpus", 0, 1).nics("nics", "mlx5_0", "mlx5_1").
				channel("fabric", testDomain, 1).
				result("other", "other.example.com", testNode, "thing-0").forPodGroup("pg").obj(),
			golden: "gpus-nics-channel.json",
			want: kubeletplugin.PrepareResult{Devices: []kubeletplugin.Device{
				{Requests: []string{"gpus"}, PoolName: testNode, DeviceName: "gpu-0", CDIDeviceIDs: []string{"gpufabric.dev/claim=uid-train-gpu-0"}},
				{Requests: []string{"gpus"}, PoolName: testNode, DeviceName: "gpu-1", CDIDeviceIDs: []string{"gpufabric.dev/claim=uid-train-gpu-1"}},
				{Requests: []string{"nics"}, PoolName: testNode, DeviceName: "nic-mlx5-0", CDIDeviceIDs: []string{"gpufabric.dev/claim=uid-train-nic-mlx5-0"}},
				{Requests: []string{"nics"}, PoolName: testNode, DeviceName: "nic-mlx5-1", CDIDeviceIDs: []string{"gpufabric.dev/claim=uid-train-nic-mlx5-1"}},
				{Requests: []string{"fabric"}, PoolName: topology.FabricDomainPoolName(testDomain), DeviceName: "channel-1", CDIDeviceIDs: []string{"gpufabric.dev/claim=uid-train-channel-1"}},
			}},
		},
		{
			name:   "one gpu for a pod",
			claim:  newClaim("single").gpus("gpu", 5).forPod("p").obj(),
			golden: "one-gpu.json",
			want: kubeletplugin.PrepareResult{Devices: []kubeletplugin.Device{
				{Requests: []string{"gpu"}, PoolName: testNode, DeviceName: "gpu-5", CDIDeviceIDs: []string{"gpufabric.dev/claim=uid-single-gpu-5"}},
			}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			d := e.driver()
			got := mustPrepare(t, e.ctx, d, tc.claim)[tc.claim.UID]
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("result (-want +got):\n%s", diff)
			}
			compareGolden(t, e.specPath(tc.claim.UID), filepath.Join("testdata", tc.golden))
			entry := e.loadCheckpoint().Claims[tc.claim.UID]
			if entry == nil || entry.State != checkpoint.StatePrepareCompleted || entry.BootID != "boot-1" {
				t.Errorf("checkpoint entry = %+v, want completed in boot-1", entry)
			}
		})
	}
}

func compareGolden(t *testing.T, gotPath, goldenPath string) {
	t.Helper()
	got, err := os.ReadFile(gotPath)
	if err != nil {
		t.Fatal(err)
	}
	if *update {
		if err := os.WriteFile(goldenPath, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(goldenPath)
	if err != nil {
		t.Fatalf("%v (run with -update to create)", err)
	}
	if diff := cmp.Diff(string(want), string(got)); diff != "" {
		t.Errorf("CDI spec %s (-want +got):\n%s", gotPath, diff)
	}
}

func TestPrepareIsIdempotent(t *testing.T) {
	e := newEnv(t)
	d := e.driver()
	// A claim shared by a PodGroup is prepared once per pod on the node.
	rc := newClaim("shared").gpus("gpus", 0, 1).forPodGroup("pg").obj()
	first := mustPrepare(t, e.ctx, d, rc)
	before, err := os.Stat(e.checkpointPath())
	if err != nil {
		t.Fatal(err)
	}
	second := mustPrepare(t, e.ctx, d, rc, rc)
	if diff := cmp.Diff(first, second); diff != "" {
		t.Errorf("second prepare (-first +second):\n%s", diff)
	}
	after, _ := os.Stat(e.checkpointPath())
	if !os.SameFile(before, after) {
		t.Error("an idempotent prepare rewrote the checkpoint")
	}
	// A deleted spec file is rewritten.
	if err := os.Remove(e.specPath(rc.UID)); err != nil {
		t.Fatal(err)
	}
	third := mustPrepare(t, e.ctx, d, rc)
	if diff := cmp.Diff(first, third); diff != "" || !e.specExists(rc.UID) {
		t.Errorf("prepare after spec loss: exists=%v (-first +third):\n%s", e.specExists(rc.UID), diff)
	}
}

func TestUnprepare(t *testing.T) {
	e := newEnv(t)
	d := e.driver()
	a := newClaim("a").gpus("gpus", 0).obj()
	b := newClaim("b").gpus("gpus", 1).obj()
	unknown := newClaim("unknown").obj()
	mustPrepare(t, e.ctx, d, a, b)
	got := unprepare(t, e.ctx, d, a, unknown)
	if diff := cmp.Diff(map[types.UID]error{a.UID: nil, unknown.UID: nil}, got, cmpErrors); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if e.specExists(a.UID) || !e.specExists(b.UID) {
		t.Errorf("spec a exists=%v (want false), b exists=%v (want true)", e.specExists(a.UID), e.specExists(b.UID))
	}
	cp := e.loadCheckpoint()
	if _, ok := cp.Claims[a.UID]; ok || cp.Claims[b.UID] == nil {
		t.Errorf("checkpoint claims = %v, want only b", cp.Claims)
	}
	if got := unprepare(t, e.ctx, d, a); got[a.UID] != nil {
		t.Errorf("second unprepare: %v", got[a.UID])
	}
	// The device is free again.
	mustPrepare(t, e.ctx, d, newClaim("c").gpus("gpus", 0).obj())
}

var cmpErrors = cmp.Comparer(func(a, b error) bool { return (a == nil) == (b == nil) })

func TestDoubleBookingRefused(t *testing.T) {
	tests := []struct {
		name    string
		first   *resourceapi.ResourceClaim
		second  *resourceapi.ResourceClaim
		wantErr error
	}{
		{
			name:    "same gpu",
			first:   newClaim("a").gpus("gpus", 0, 1).obj(),
			second:  newClaim("b").gpus("gpus", 1, 2).obj(),
			wantErr: ErrDoubleBooked,
		},
		{
			name:    "same nic",
			first:   newClaim("a").nics("nics", "mlx5_3").obj(),
			second:  newClaim("b").nics("nics", "mlx5_3").obj(),
			wantErr: ErrDoubleBooked,
		},
		{
			name:    "same channel",
			first:   newClaim("a").channel("fabric", testDomain, 1).obj(),
			second:  newClaim("b").channel("fabric", testDomain, 1).obj(),
			wantErr: ErrDoubleBooked,
		},
		{
			name:   "admin access may share",
			first:  newClaim("a").gpus("gpus", 0).obj(),
			second: newClaim("b").gpus("monitor", 0).adminAccess().obj(),
		},
		{
			name:   "different devices",
			first:  newClaim("a").gpus("gpus", 0).obj(),
			second: newClaim("b").gpus("gpus", 1).obj(),
		},
	}
	for _, tc := range tests {
		for _, batch := range []bool{false, true} {
			name := tc.name + map[bool]string{false: ", separate calls", true: ", one batch"}[batch]
			t.Run(name, func(t *testing.T) {
				e := newEnv(t)
				d := e.driver()
				var res map[types.UID]kubeletplugin.PrepareResult
				if batch {
					res = prepare(t, e.ctx, d, tc.first, tc.second)
				} else {
					mustPrepare(t, e.ctx, d, tc.first)
					res = prepare(t, e.ctx, d, tc.second)
				}
				if res[tc.first.UID].Err != nil {
					t.Fatalf("first claim: %v", res[tc.first.UID].Err)
				}
				err := res[tc.second.UID].Err
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("second claim error = %v, want %v", err, tc.wantErr)
				}
				if tc.wantErr != nil && !containsAll(err.Error(), "default/b", "default/a", string(tc.first.UID)) {
					t.Errorf("error does not name both claims: %v", err)
				}
				if tc.wantErr != nil && e.specExists(tc.second.UID) {
					t.Error("refused claim has a CDI spec")
				}
			})
		}
	}
}

func TestBatchWithBadClaims(t *testing.T) {
	e := newEnv(t)
	d := e.driver()
	e.resolver.remove("gpu-6")
	good := newClaim("good").gpus("gpus", 0).nics("nics", "mlx5_0").obj()
	tests := []struct {
		claim   *resourceapi.ResourceClaim
		wantErr error
	}{
		{good, nil},
		{newClaim("unallocated").unallocated().obj(), ErrNotAllocated},
		{newClaim("unknown-device").gpus("gpus", 99).obj(), claims.ErrUnknownDevice},
		{newClaim("resolver-lacks").gpus("gpus", 6).obj(), ErrResolve},
		{newClaim("weird-name").result("r", topology.DriverName, testNode, "fpga-0").obj(), claims.ErrUnknownDevice},
		{newClaim("other-node").result("r", topology.DriverName, "node-b", "gpu-1").obj(), ErrNotOnNode},
		{newClaim("other-driver").result("r", "other.example.com", testNode, "gpu-1").obj(), ErrNoDevices},
		{newClaim("bad-channel").result("r", topology.DriverName, topology.FabricDomainPoolName(testDomain), "channel-x").obj(), claims.ErrUnknownDevice},
		{newClaim("wrong-domain").channel("f", "nvswitch.node-b", 0).obj(), claims.ErrWrongDomain},
		{newClaim("half-bad").gpus("gpus", 2).gpus("gpus", 77).obj(), claims.ErrUnknownDevice},
	}
	var rcs []*resourceapi.ResourceClaim
	for _, tc := range tests {
		rcs = append(rcs, tc.claim)
	}
	res := prepare(t, e.ctx, d, rcs...)
	if len(res) != len(rcs) {
		t.Errorf("got %d results for %d claims", len(res), len(rcs))
	}
	for _, tc := range tests {
		if err := res[tc.claim.UID].Err; !errors.Is(err, tc.wantErr) {
			t.Errorf("claim %s: error = %v, want %v", tc.claim.Name, err, tc.wantErr)
		}
		if tc.wantErr != nil && e.specExists(tc.claim.UID) {
			t.Errorf("failed claim %s has a CDI spec", tc.claim.Name)
		}
	}
	if !e.specExists(good.UID) {
		t.Error("good claim has no CDI spec")
	}
	// A failed claim holds nothing: gpu-2 is free.
	mustPrepare(t, e.ctx, d, newClaim("gpu2").gpus("gpus", 2).obj())
}

func TestNamePrefixes(t *testing.T) {
	for got, want := range map[string]string{
		topology.GPUDeviceName(3):            gpuPrefix + "3",
		topology.NICDeviceName("mlx5_1"):     nicPrefix + "mlx5-1",
		topology.ChannelDeviceName(2):        channelPrefix + "2",
		topology.FabricDomainPoolName("d.1"): fabricPoolPrefix + "d.1",
	} {
		if got != want {
			t.Errorf("topology name %q, prefix gives %q", got, want)
		}
	}
}
