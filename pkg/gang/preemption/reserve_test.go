package preemption

import (
	"context"
	"github.com/gpufabric/gpufabric/pkg/gang/placement/scenario"
	"testing"
	"time"

	"github.com/gpufabric/gpufabric/pkg/topology"
)

func TestShadow(t *testing.T) {
	at := func(m int) time.Time { return now.Add(time.Duration(m) * time.Minute) }
	tests := []struct {
		name       string
		need, free int
		releases   []Release
		want       time.Time
		wantOK     bool
	}{
		{name: "fits now", need: 4, free: 4, want: now, wantOK: true},
		{name: "second release completes it", need: 8, free: 2,
			releases: []Release{{At: at(30), Devices: 4}, {At: at(10), Devices: 2}, {At: at(20), Devices: 4}},
			want:     at(20), wantOK: true},
		{name: "bounded releases never add up", need: 16, free: 2, releases: []Release{{At: at(5), Devices: 4}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := Shadow(now, tc.need, tc.free, tc.releases)
			if ok != tc.wantOK || !got.Equal(tc.want) {
				t.Fatalf("Shadow = %v %v, want %v %v", got, ok, tc.want, tc.wantOK)
			}
		})
	}
	if !MayBackfill(now, 10*time.Minute, at(10), true) || MayBackfill(now, 11*time.Minute, at(10), true) ||
		MayBackfill(now, time.Minute, at(10), false) || MayBackfill(now, 0, at(10), true) {
		t.Fatal("MayBackfill: wrong answers at the shadow's edge, without a shadow, or without a declared run time")
	}
}

func TestClosestDomain(t *testing.T) {
	nvlink := topology.TopologyKeyNVLinkDomain
	// a has 2 free GPUs, b has 6: b is closest for a 16-GPU gang that fits
	// an empty domain; a 20-GPU gang fits no domain.
	w := newWorld(t, scenario.GangSpec{Name: "big", Pods: 4, GPUsPerPod: 4, TopologyKey: nvlink})
	for i := range 4 {
		w.run("pod:default/a"+string(rune('0'+i)), 0, false, time.Hour, pod{node: n("a", i), gpus: []int{0, 1, 2, 3}[:4-boolInt(i < 2)]})
	}
	w.run("pod:default/b0", 0, false, time.Hour, full(n("b", 0)))
	w.run("pod:default/b1", 0, false, time.Hour, pod{node: n("b", 1), gpus: []int{0, 1}})
	r, err := ClosestDomain(context.Background(), w.built.Config, w.built.Input, w.built.Gangs[0], 0)
	if err != nil || r == nil {
		t.Fatalf("ClosestDomain: %v %v", r, err)
	}
	if r.Domain != "b" || r.Free != 10 || r.Need != 16 || len(r.Nodes) != 4 {
		t.Fatalf("reservation %+v, want domain b with 10 free of the 16 needed", r)
	}
	huge := newWorld(t, scenario.GangSpec{Name: "huge", Pods: 5, GPUsPerPod: 4, TopologyKey: nvlink})
	if r, err := ClosestDomain(context.Background(), huge.built.Config, huge.built.Input, huge.built.Gangs[0], 0); err != nil || r != nil {
		t.Fatalf("a gang no domain can hold got %+v %v", r, err)
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
