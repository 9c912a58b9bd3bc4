package sim

import (
	"context"
	"testing"
)

// TestReservationEndsStarvation: one NVLink domain pair (a, b) of two
// 4-GPU nodes each; single-node gangs of 100 s arrive every 25 s and keep
// every node busy, staggered so that a node frees every 25 s. A gang that
// needs two nodes of one domain (arrived at 1 s) waits for the stream to
// end with plain gpufabric: every freed node is backfilled at once. With a
// 50 s starvation bound it holds a domain; the stream's gangs cannot end
// before the domain has room, so they leave it alone, and the gang starts
// within two departures.
func TestReservationEndsStarvation(t *testing.T) {
	f := tinyFabric(t, map[string]int{"a": 2, "b": 2}, nil)
	tr := &Trace{}
	for i := range 40 {
		tr.Gangs = append(tr.Gangs, TraceGang{ID: i, Arrival: int64(25 * i), Duration: 100, Pods: 1, GPUsPerPod: 4})
	}
	// The big gang arrives once the stream fills all 16 GPUs (t = 75):
	// each departure frees 4 GPUs exactly when the next small gang comes.
	big := TraceGang{ID: 1000, Arrival: 80, Duration: 100, Pods: 2, GPUsPerPod: 4}
	tr.Gangs = append(tr.Gangs[:4:4], append([]TraceGang{big}, tr.Gangs[4:]...)...)
	wait := func(name string) int64 {
		t.Helper()
		p, err := NewPolicy(name, f, PolicyOptions{StarvationBound: 50})
		if err != nil {
			t.Fatal(err)
		}
		res, err := Run(context.Background(), f, tr, p, Options{Horizon: 2000})
		if err != nil {
			t.Fatal(err)
		}
		if res.SizePlaced[8] != 1 {
			t.Fatalf("%s: the 8-GPU gang was not placed by the horizon", name)
		}
		return res.SizeWaits[8][0]
	}
	plain, reserved := wait(PolicyGPUFabric), wait(PolicyGPUFabricReserve)
	if plain < 900 {
		t.Fatalf("plain gpufabric placed the big gang after %d s; the stream (until 975 s) should starve it", plain)
	}
	if reserved > 200 {
		t.Fatalf("with the reservation the big gang waited %d s, want it placed within two departures of the bound", reserved)
	}
}
