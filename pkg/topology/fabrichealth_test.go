package topology_test

import (
	"testing"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/gpufabric/gpufabric/pkg/topology"
)

func TestFabricSick(t *testing.T) {
	errs := func(n int64) map[resourceapi.QualifiedName]resourceapi.DeviceAttribute {
		return map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{topology.AttrFabricErrors: {IntValue: &n}}
	}
	taint := func(key string) []resourceapi.DeviceTaint {
		return []resourceapi.DeviceTaint{{Key: key, Effect: resourceapi.DeviceTaintEffectNoSchedule}}
	}
	for _, tc := range []struct {
		name string
		dev  resourceapi.Device
		want bool
	}{
		{"healthy, no attribute", resourceapi.Device{}, false},
		{"zero errors", resourceapi.Device{Attributes: errs(0)}, false},
		{"errors in the window", resourceapi.Device{Attributes: errs(3)}, true},
		{"fabric-errors taint", resourceapi.Device{Taints: taint(topology.TaintFabricErrors)}, true},
		{"degraded nvlinks", resourceapi.Device{Taints: taint(topology.TaintNVLinkDegraded)}, true},
		{"port down", resourceapi.Device{Taints: taint(topology.TaintPortDown)}, true},
		{"an xid is not fabric trouble", resourceapi.Device{Taints: taint(topology.TaintXID)}, false},
	} {
		if got := topology.FabricSick(&tc.dev); got != tc.want {
			t.Errorf("%s: FabricSick = %v, want %v", tc.name, got, tc.want)
		}
	}
}
