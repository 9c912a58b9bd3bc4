package node

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
)

func TestConcurrentPrepareNeverDoubleBooks(t *testing.T) {
	tests := []struct {
		name    string
		drivers int
	}{
		{name: "one driver", drivers: 1},
		// Two instances on the same directories, as during a rolling update.
		{name: "two drivers", drivers: 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			e.noSync = true
			var ds []*Driver
			for range tc.drivers {
				ds = append(ds, e.driver())
			}
			shared := newClaim("shared").gpus("gpus", 7).forPodGroup("pg").obj()
			const contenders = 12
			claims := make([]*resourceapi.ResourceClaim, contenders)
			for i := range claims {
				claims[i] = newClaim(fmt.Sprintf("c%d", i)).gpus("gpus", i%3).obj()
			}
			results := make([]kubeletplugin.PrepareResult, contenders)
			var wg sync.WaitGroup
			for i := range contenders {
				wg.Go(func() {
					d := ds[i%len(ds)]
					results[i] = prepare(t, e.ctx, d, claims[i])[claims[i].UID]
					if r := prepare(t, e.ctx, d, shared)[shared.UID]; r.Err != nil {
						t.Errorf("shared claim: %v", r.Err)
					}
				})
			}
			wg.Wait()
			winners := map[string]int{}
			for i, r := range results {
				switch {
				case r.Err == nil:
					winners[r.Devices[0].DeviceName]++
				case !errors.Is(r.Err, ErrDoubleBooked):
					t.Errorf("claim %d: %v", i, r.Err)
				}
			}
			for _, gpu := range []string{"gpu-0", "gpu-1", "gpu-2"} {
				if winners[gpu] != 1 {
					t.Errorf("%s prepared for %d claims, want exactly 1", gpu, winners[gpu])
				}
			}
			if n := len(e.loadCheckpoint().Claims); n != 4 {
				t.Errorf("checkpoint has %d claims, want 4 (3 winners + shared)", n)
			}
		})
	}
}

func TestPrepareAndUnprepareOnDifferentInstances(t *testing.T) {
	e := newEnv(t)
	old, next := e.driver(), e.driver()
	a := newClaim("a").gpus("gpus", 0).obj()
	mustPrepare(t, e.ctx, old, a)
	if got := unprepare(t, e.ctx, next, a); got[a.UID] != nil {
		t.Fatal(got[a.UID])
	}
	if e.specExists(a.UID) {
		t.Error("spec left after unprepare on the other instance")
	}
	// The old instance sees that gpu-0 is free again.
	mustPrepare(t, e.ctx, old, newClaim("b").gpus("gpus", 0).obj())
	res := prepare(t, e.ctx, next, newClaim("c").gpus("gpus", 0).obj())
	if !errors.Is(res["uid-c"].Err, ErrDoubleBooked) {
		t.Errorf("other instance: %v, want ErrDoubleBooked", res["uid-c"].Err)
	}
}
