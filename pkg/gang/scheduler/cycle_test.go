package scheduler

import (
	"testing"

	"github.com/gpufabric/gpufabric/pkg/gang/placement"
)

func TestDevicesShort(t *testing.T) {
	gang := func(members, minCount int) *placement.Gang {
		return &placement.Gang{Members: make([]placement.Member, members), MinCount: minCount}
	}
	level := func(free int) placement.LevelReport {
		return placement.LevelReport{Best: &placement.DomainReport{FreeDevices: free}}
	}
	for _, tc := range []struct {
		name string
		g    *placement.Gang
		u    *placement.Unschedulable
		want int
	}{
		{"short everywhere: lacks the difference in the best domain", gang(4, 4), &placement.Unschedulable{Devices: 32, Levels: []placement.LevelReport{level(8), level(20), level(24)}}, 8},
		{"a domain has the devices: something else refused it", gang(4, 4), &placement.Unschedulable{Devices: 32, Levels: []placement.LevelReport{level(8), level(40)}}, 0},
		{"minCount below the size: a part may fit", gang(4, 2), &placement.Unschedulable{Devices: 32, Levels: []placement.LevelReport{level(8)}}, 0},
		{"no device count", gang(4, 4), &placement.Unschedulable{Levels: []placement.LevelReport{level(0)}}, 0},
		{"no level tried", gang(4, 4), &placement.Unschedulable{Devices: 32}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := devicesShort(tc.g, tc.u); got != tc.want {
				t.Errorf("devicesShort = %d, want %d", got, tc.want)
			}
		})
	}
}
