package placement

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpufabric/gpufabric/pkg/gang/placement/index"
)

func groupsOf(caps map[string]int) []packGroup {
	var out []packGroup
	for _, id := range []string{"a", "b", "c", "d", "e", "f"} {
		if c, ok := caps[id]; ok {
			out = append(out, packGroup{id: id, cap: c, pods: c})
		}
	}
	return out
}

func ids(groups []packGroup, order []int) []string {
	out := make([]string, len(order))
	for i, gi := range order {
		out[i] = groups[gi].id
	}
	return out
}

// TestLeastSpread: the fewest groups; among those choices the fullest (each
// pick the smallest with which the rest can still hold the demand); the
// rest largest first; ties by id.
func TestLeastSpread(t *testing.T) {
	tests := map[string]struct {
		caps       map[string]int
		demand     int
		want       []string
		wantChosen int
	}{
		"one holds it: the smallest that does":   {caps: map[string]int{"a": 32, "b": 20, "c": 8}, demand: 16, want: []string{"b", "a", "c"}, wantChosen: 1},
		"exact fit wins over a larger":           {caps: map[string]int{"a": 32, "b": 16}, demand: 16, want: []string{"b", "a"}, wantChosen: 1},
		"two: the fullest pair that holds it":    {caps: map[string]int{"a": 8, "b": 20, "c": 28, "d": 32}, demand: 48, want: []string{"b", "c", "d", "a"}, wantChosen: 2},
		"three needed, the small one first":      {caps: map[string]int{"a": 10, "b": 10, "c": 10, "d": 4}, demand: 24, want: []string{"d", "a", "b", "c"}, wantChosen: 3},
		"equal caps go by id":                    {caps: map[string]int{"a": 8, "b": 8, "c": 8, "d": 8}, demand: 24, want: []string{"a", "b", "c", "d"}, wantChosen: 3},
		"not enough: all of them, largest first": {caps: map[string]int{"a": 4, "b": 6}, demand: 20, want: []string{"b", "a"}, wantChosen: 2},
		"no demand: largest first":               {caps: map[string]int{"a": 4, "b": 6}, demand: 0, want: []string{"b", "a"}, wantChosen: 0},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			groups := groupsOf(tc.caps)
			order, chosen := leastSpread(groups, tc.demand)
			if diff := cmp.Diff(tc.want, ids(groups, order)); diff != "" {
				t.Errorf("order (-want +got):\n%s", diff)
			}
			if chosen != tc.wantChosen {
				t.Errorf("chosen = %d, want %d", chosen, tc.wantChosen)
			}
		})
	}
}

// TestBalancedQuota: members as even as the groups' capacity allows, the
// small groups filled first, nodes of unchosen groups take none.
func TestBalancedQuota(t *testing.T) {
	tests := map[string]struct {
		caps   map[string]int
		chosen []string
		need   int
		want   map[string]int
	}{
		"even":               {caps: map[string]int{"a": 8, "b": 8}, chosen: []string{"a", "b"}, need: 10, want: map[string]int{"a": 5, "b": 5}},
		"odd: smaller first": {caps: map[string]int{"a": 8, "b": 6}, chosen: []string{"a", "b"}, need: 11, want: map[string]int{"a": 5, "b": 6}},
		"capped by a small":  {caps: map[string]int{"a": 3, "b": 8}, chosen: []string{"b", "a"}, need: 10, want: map[string]int{"a": 3, "b": 7}},
		"three":              {caps: map[string]int{"a": 8, "b": 8, "c": 8}, chosen: []string{"a", "b", "c"}, need: 20, want: map[string]int{"a": 7, "b": 7, "c": 6}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			groups := groupsOf(tc.caps)
			nodes := map[string]*index.NodeState{}
			var chosen []int
			for gi := range groups {
				ns := new(index.NodeState) // the quota tells nodes apart by identity
				nodes[groups[gi].id] = ns
				groups[gi].nodes = []packNode{{ns: ns}}
			}
			for _, id := range tc.chosen {
				for gi := range groups {
					if groups[gi].id == id {
						chosen = append(chosen, gi)
					}
				}
			}
			ql := balancedQuota(groups, chosen, tc.need).start()
			got := map[string]int{}
			for id, ns := range nodes {
				for ql.allows(ns) {
					ql.take(ns)
					got[id]++
				}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("members per group (-want +got):\n%s", diff)
			}
		})
	}
	var none *spreadQuota
	if ql := none.start(); !ql.allows(new(index.NodeState)) {
		t.Error("a nil quota must allow every node")
	}
}

func TestSpreadSummary(t *testing.T) {
	d := &Decision{Spread: []LevelSpread{
		{TopologyKey: "rack", Domains: []DomainPods{{ID: "r1", Pods: 12}}},
		{TopologyKey: "gpufabric.dev/nvlinkDomain", Domains: []DomainPods{{ID: "d", Pods: 8}, {ID: "b", Pods: 4}}},
	}}
	want := "over 2 gpufabric.dev/nvlinkDomain domains (d: 8 pods, b: 4)"
	if got := d.SpreadSummary(); got != want {
		t.Errorf("SpreadSummary() = %q, want %q", got, want)
	}
	many := &Decision{Spread: []LevelSpread{{TopologyKey: "k", Domains: []DomainPods{{"a", 3}, {"b", 2}, {"c", 1}, {"d", 1}, {"e", 1}, {"f", 1}}}}}
	if got, want := many.SpreadSummary(), "over 6 k domains (a: 3 pods, b: 2, c: 1, d: 1, 2 more)"; got != want {
		t.Errorf("SpreadSummary() = %q, want %q", got, want)
	}
	if got := (&Decision{Spread: d.Spread[:1]}).SpreadSummary(); got != "" {
		t.Errorf("one domain per level: SpreadSummary() = %q, want empty", got)
	}
}
