package trees

import (
	"bytes"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpufabric/gpufabric/pkg/topology"
)

func TestMeasure(t *testing.T) {
	nvl := topology.TopologyKeyNVLinkDomain
	topo, names := racksOf(rack{"a", "l0", 4, 4}, rack{"b", "l0", 2, 4}, rack{"c", "l1", 2, 4})
	at := func(ns ...string) []int {
		var out []int
		for _, n := range ns {
			out = append(out, slices.Index(names, n))
		}
		return out
	}
	job := Spec{Kind: KindTraining, Name: "job", TopologyKey: "leaf", Children: []Spec{
		{Name: "s0", Role: RoleSegment, TopologyKey: nvl, Pods: 2, GPUsPerPod: 4},
		{Name: "s1", Role: RoleSegment, TopologyKey: nvl, Pods: 2, GPUsPerPod: 4}}}
	svc := Spec{Kind: KindInference, Name: "svc", TopologyKey: nvl, Children: []Spec{
		{Name: "frontend", Role: RoleFrontend, Pods: 1},
		{Name: "prefill", Role: RolePrefill, Pods: 2, GPUsPerPod: 2, RailGroup: "kv"},
		{Name: "decode", Role: RoleDecode, Pods: 2, GPUsPerPod: 2, RailGroup: "kv"}}}
	tests := []struct {
		name  string
		s     Spec
		nodes []int
		devs  [][]int
		want  Outcome
	}{{
		name:  "segments each in a rack, the job in a leaf",
		s:     job,
		nodes: at("a-n0", "a-n1", "b-n0", "b-n1"),
		want:  Outcome{AsAsked: true, Segments: 2, SegmentsInDomain: 2},
	}, {
		name:  "a segment split over two racks",
		s:     job,
		nodes: at("a-n0", "a-n1", "a-n2", "b-n0"),
		want:  Outcome{AsAsked: false, Segments: 2, SegmentsInDomain: 1},
	}, {
		name:  "segments in NVLink domains of two leaves",
		s:     job,
		nodes: at("a-n0", "a-n1", "c-n0", "c-n1"),
		want:  Outcome{AsAsked: false, Segments: 2, SegmentsInDomain: 2},
	}, {
		// Prefill on rails {0,1} and {2,3}, decode likewise: of the 4
		// prefill × decode pod pairs, 2 share a rail set; not one set.
		name:  "a service stacked two pods a node, lowest GPUs first",
		s:     svc,
		nodes: at("a-n0", "a-n0", "a-n0", "a-n1", "a-n1"),
		devs:  [][]int{nil, {0, 1}, {2, 3}, {0, 1}, {2, 3}},
		want:  Outcome{AsAsked: true, Couples: 1, Pairs: 4, PairsMatched: 2},
	}, {
		name:  "a service on one rail set",
		s:     svc,
		nodes: at("a-n0", "a-n0", "a-n1", "a-n2", "a-n3"),
		devs:  [][]int{nil, {2, 3}, {3, 2}, {2, 3}, {2, 3}},
		want:  Outcome{AsAsked: true, Couples: 1, CouplesMatched: 1, Pairs: 4, PairsMatched: 4},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := mustValid(t, &tc.s)
			if diff := cmp.Diff(tc.want, Measure(topo, s, tc.nodes, tc.devs)); diff != "" {
				t.Errorf("outcome (-want +got):\n%s", diff)
			}
		})
	}
}

func TestStatsTable(t *testing.T) {
	job := &Spec{Kind: KindTraining}
	svc := &Spec{Kind: KindInference}
	var s Stats
	s.Started(job, Outcome{AsAsked: true, Segments: 8, SegmentsInDomain: 8}, 60)
	s.Started(svc, Outcome{AsAsked: false, Couples: 1, Pairs: 8, PairsMatched: 2}, 0)
	s.Waiting(job, 600)
	s.Refused(true)
	s.Refused(false)
	var b bytes.Buffer
	rows := []Row{{Policy: "p", Config: "c", Stats: &s, BusyPct: 50, Latencies: []time.Duration{3 * time.Millisecond, time.Millisecond}}, {Policy: "k", Stats: &s, KubeRule: true}, {Policy: "f", Stats: &s, NoRefusals: true}}
	if err := Markdown(&b, rows); err != nil {
		t.Fatal(err)
	}
	got := strings.Split(strings.TrimSpace(b.String()), "\n")[2:]
	want := []string{
		"| p | 2 / 3 (1) | 1 / 2 (1) | 1 / 1 (0) | 100.0% (8 / 8) | 0.0% (0 / 1) / 25.0% (2 / 8) | 5.5 / 10.0 | 0.0 / 0.0 | 2 (1) | 1.00 / 3.00 | 50.0% | c |",
		"| k | 2 / 3 (1) | 1 / 2 (1) | 1 / 1 (0) | 100.0% (8 / 8) | 0.0% (0 / 1) / 25.0% (2 / 8) | 5.5 / 10.0 | 0.0 / 0.0 | 2 (—) | — | 0.0% |  |",
		"| f | 2 / 3 (1) | 1 / 2 (1) | 1 / 1 (0) | 100.0% (8 / 8) | 0.0% (0 / 1) / 25.0% (2 / 8) | 5.5 / 10.0 | 0.0 / 0.0 | — | — | 0.0% |  |",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("rows (-want +got):\n%s", diff)
	}
}

func TestDevices(t *testing.T) {
	topo, _ := racksOf(rack{"a", "l0", 2, 4})
	d := NewDevices(topo, [][]int{{1}, nil})
	got, err := d.Lowest(0, 2)
	if err != nil || !slices.Equal(got, []int{0, 2}) {
		t.Errorf("Lowest(0, 2) = %v, %v; want [0 2] (GPU 1 busy)", got, err)
	}
	if _, err := d.Lowest(0, 2); err == nil {
		t.Error("Lowest(0, 2) with one GPU free: no error")
	}
	if err := d.Take(1, []int{3, 3}); err == nil {
		t.Error("Take of GPU 3 twice: no error")
	}
	if err := d.Take(1, []int{3, 0}); err != nil {
		t.Errorf("Take after a refused Take: %v (the refused one must take nothing)", err)
	}
	d.Give(0, []int{0})
	if got, _ := d.Lowest(0, 1); !slices.Equal(got, []int{0}) {
		t.Errorf("after Give: Lowest(0, 1) = %v, want [0]", got)
	}
}
