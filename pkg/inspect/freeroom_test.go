package inspect

import (
	"bytes"
	"path/filepath"
	"testing"
	"time"

	"github.com/gpufabric/gpufabric/pkg/gang/freeroom"
	"github.com/gpufabric/gpufabric/pkg/topology"
)

// TestRenderFreeRoom: the free-room view as a tenant sees it (golden
// testdata/free-room.golden): where it comes from and its age, per level
// the listed domains with bars, those left out, the counts of domains
// with at least N free, the cluster's totals; a level without domains is
// left out; the spares kept for replacements, not counted free.
func TestRenderFreeRoom(t *testing.T) {
	v := &freeroom.View{Version: 1, Time: testNow.Add(-42 * time.Second), GPUs: 20, FreeGPUs: 11, Levels: []freeroom.Level{
		{Key: topology.TopologyKeyNVLinkDomain, Domains: 3, FreeGPUs: 11, LargestFree: 7,
			AtLeast: []freeroom.Count{{GPUs: 1, Domains: 2}, {GPUs: 2, Domains: 2}, {GPUs: 4, Domains: 2}, {GPUs: 8, Domains: 0}},
			Top:     []freeroom.Domain{{ID: "dom-b", GPUs: 8, Free: 7}, {ID: "dom-c", GPUs: 4, Free: 4}}, Omitted: 1},
		{Key: "topology.gpufabric.dev/rack", Domains: 2, FreeGPUs: 11, LargestFree: 11,
			AtLeast: []freeroom.Count{{GPUs: 1, Domains: 1}, {GPUs: 2, Domains: 1}, {GPUs: 4, Domains: 1}, {GPUs: 8, Domains: 1}},
			Top:     []freeroom.Domain{{ID: "rack-2", GPUs: 12, Free: 11}, {ID: "rack-1", GPUs: 8, Free: 0}}},
		{Key: "topology.gpufabric.dev/ib-leaf", AtLeast: []freeroom.Count{}, Top: []freeroom.Domain{}},
	}, Spares: &freeroom.Spares{PerDomain: 1, Level: topology.TopologyKeyNVLinkDomain, KeptNodes: 2, KeptGPUs: 8, DomainsShort: 1}}
	r := &FreeRoomReport{Source: "gpufabric-system/gpufabric-free-room", Reason: `list nodes: nodes is forbidden: User "alice" cannot list resource "nodes"`, View: v}
	var out bytes.Buffer
	if err := RenderFreeRoom(&out, r, Style{Now: testNow}); err != nil {
		t.Fatal(err)
	}
	checkGolden(t, filepath.Join("testdata", "free-room.golden"), out.String())
}
