package guard

import (
	"github.com/gpufabric/gpufabric/pkg/gang/internal/objtest"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

func allocated(name string, devs ...string) *resourceapi.ResourceClaim {
	c := objtest.Claim(name, true)
	for _, d := range devs {
		c.Status.Allocation.Devices.Results = append(c.Status.Allocation.Devices.Results,
			resourceapi.DeviceRequestAllocationResult{Request: "r", Driver: "gpufabric.dev", Pool: "node-a", Device: d})
	}
	return c
}

// TestAllocIndex: a device held by two claims is reported when the second
// claim is allocated, not again once one lets go; a claim giving up a
// device another still holds reports that other (an orphan, hold.go);
// other drivers and admin-access results are ignored.
func TestAllocIndex(t *testing.T) {
	x := newAllocIndex()
	now := time.Now()
	other := allocated("other", "gpu-0")
	other.Status.Allocation.Devices.Results[0].Driver = "other.example.com"
	admin := allocated("admin", "gpu-1")
	admin.Status.Allocation.Devices.Results[0].AdminAccess = ptr.To(true)
	steps := []struct {
		claim   *resourceapi.ResourceClaim
		dead    bool
		want    []string
		orphans []types.UID
	}{
		{allocated("a", "gpu-0", "gpu-1"), false, nil, nil},
		{other, false, nil, nil},
		{admin, false, nil, nil},
		{allocated("b", "gpu-1", "gpu-2"), false, []string{"gpufabric.dev/node-a/gpu-1"}, nil},
		{allocated("b", "gpu-2"), false, nil, []types.UID{allocated("a").UID}},
		{allocated("c", "gpu-2"), false, []string{"gpufabric.dev/node-a/gpu-2"}, nil},
		{objtest.Claim("c", false), true, nil, []types.UID{allocated("b").UID}},
		{objtest.Claim("b", false), true, nil, nil},
	}
	for i, s := range steps {
		var devs []deviceKey
		if !s.dead {
			devs = allocatedDevices(s.claim)
		}
		var got []string
		dup, orphans := x.set(s.claim.UID, devs, now)
		for _, d := range dup {
			got = append(got, d.String())
		}
		if diff := cmp.Diff(s.want, got); diff != "" {
			t.Errorf("step %d (%s): double allocations (-want +got):\n%s", i, s.claim.Name, diff)
		}
		if diff := cmp.Diff(s.orphans, orphans); diff != "" {
			t.Errorf("step %d (%s): orphans (-want +got):\n%s", i, s.claim.Name, diff)
		}
	}
	if h := x.holders(deviceKey{"gpufabric.dev", "node-a", "gpu-2"}); len(h) != 0 {
		t.Errorf("gpu-2 held by %v, want none", h)
	}
	if x.allocated(allocated("b").UID) || !x.allocated(allocated("a").UID) {
		t.Errorf("allocated: b %v (want false), a %v (want true)", x.allocated(allocated("b").UID), x.allocated(allocated("a").UID))
	}
}

// TestChooseKeeper: the claim whose pod started keeps the device, else a
// gang's, else the one allocated first (timestamp, then first seen), else
// the smaller UID.
func TestChooseKeeper(t *testing.T) {
	t0 := time.Unix(1000, 0)
	use := func(name string, started bool, seen time.Time, stamp *time.Time) *claimUse {
		c := allocated(name, "gpu-0")
		if stamp != nil {
			c.Status.Allocation.AllocationTimestamp = &metav1.Time{Time: *stamp}
		}
		return &claimUse{claim: c, started: started, seen: seen}
	}
	later := t0.Add(time.Second)
	gang := func(u *claimUse) *claimUse { u.gang = true; return u }
	tests := []struct {
		name string
		uses []*claimUse
		want string
	}{
		{"started wins over earlier", []*claimUse{use("early", false, t0, nil), use("running", true, later, nil)}, "running"},
		{"both run: a gang's wins over earlier", []*claimUse{use("plain", true, t0, &t0), gang(use("member", true, later, &later))}, "member"},
		{"started wins over a gang's", []*claimUse{gang(use("member", false, t0, nil)), use("plain", true, later, nil)}, "plain"},
		{"allocation timestamp", []*claimUse{use("b", false, t0, &later), use("a", false, later, &t0)}, "a"},
		{"first seen", []*claimUse{use("b", false, later, nil), use("a", false, t0, nil)}, "a"},
		{"one timestamp only: first seen", []*claimUse{use("b", false, later, &t0), use("a", false, t0, nil)}, "a"},
		{"tie: smaller UID", []*claimUse{use("z", false, t0, nil), use("m", false, t0, nil)}, "m"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			keep, lose := chooseKeeper(tt.uses)
			if keep.claim.Name != tt.want || len(lose) != len(tt.uses)-1 {
				t.Errorf("kept %s (lost %d), want %s", keep.claim.Name, len(lose), tt.want)
			}
		})
	}
}

// TestStarted: only a container that ran means the claim was prepared.
func TestStarted(t *testing.T) {
	p := objtest.Pod("p")
	if started(p) {
		t.Error("pod without container statuses counted as started")
	}
	p.Status.ContainerStatuses = []v1.ContainerStatus{{State: v1.ContainerState{Waiting: &v1.ContainerStateWaiting{Reason: "ContainerCreating"}}}}
	if started(p) {
		t.Error("ContainerCreating counted as started")
	}
	p.Status.ContainerStatuses[0].State = v1.ContainerState{Running: &v1.ContainerStateRunning{}}
	if !started(p) {
		t.Error("running container not counted as started")
	}
}
