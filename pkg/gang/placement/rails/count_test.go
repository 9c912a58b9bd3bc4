package rails

import (
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestEnumSets: larger sets first, each size in lexicographic order, at
// most limit of them, and whether the limit stopped it.
func TestEnumSets(t *testing.T) {
	for _, tc := range []struct {
		name               string
		rails              []int64
		least, most, limit int
		want               [][]int64
		cut                bool
	}{
		{name: "all sizes", rails: []int64{0, 1, 2}, least: 1, most: 3, limit: 10,
			want: [][]int64{{0, 1, 2}, {0, 1}, {0, 2}, {1, 2}, {0}, {1}, {2}}},
		{name: "bounded sizes", rails: []int64{0, 1, 2, 3}, least: 2, most: 2, limit: 10,
			want: [][]int64{{0, 1}, {0, 2}, {0, 3}, {1, 2}, {1, 3}, {2, 3}}},
		{name: "limit", rails: []int64{0, 1, 2}, least: 1, most: 2, limit: 2,
			want: [][]int64{{0, 1}, {0, 2}}, cut: true},
		{name: "least 0 counts as 1", rails: []int64{5}, least: 0, most: 4, limit: 10, want: [][]int64{{5}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got [][]int64
			cut := EnumSets(tc.rails, tc.least, tc.most, tc.limit, func(r []int64) { got = append(got, slices.Clone(r)) })
			if diff := cmp.Diff(tc.want, got); diff != "" || cut != tc.cut {
				t.Errorf("sets (-want +got):\n%s\ncut %v, want %v", diff, cut, tc.cut)
			}
		})
	}
}

// TestFitAndKey: a member fits on a rail set by its fewest free lead
// devices on one rail, its lead demand and its following devices; Key
// sorts and drops repeats.
func TestFitAndKey(t *testing.T) {
	m := &Members{Class: "gpu"}
	sh := &Shape{Need: map[string]int{"gpu": 4, "nic": 2}}
	nr := NodeRails{
		Lead:  Counts{By: map[int64]int{0: 4, 1: 2, 2: 1}},
		Other: map[string]Counts{"nic": {By: map[int64]int{0: 1, 1: 1}, None: 2}},
	}
	for _, tc := range []struct {
		rails []int64
		cheap int
		want  int
	}{
		{rails: []int64{0, 1}, cheap: 8, want: 1},    // 6 lead devices / 4, nics 4/2
		{rails: []int64{0, 1, 2}, cheap: 8, want: 1}, // rail 2 has one free
		{rails: []int64{0, 1, 2, 3}, cheap: 8, want: 0},
		{rails: []int64{0, 1, 2, 3, 4}, cheap: 8, want: 0}, // more rails than lead demand
		{rails: []int64{0, 1}, cheap: 0, want: 0},
	} {
		if got := m.Fit(nr, sh, tc.rails, tc.cheap); got != tc.want {
			t.Errorf("Fit(%v, cheap %d) = %d, want %d", tc.rails, tc.cheap, got, tc.want)
		}
	}
	if got := Key([]int64{3, 1, 3, 0}); got != "0,1,3" {
		t.Errorf("Key = %q, want 0,1,3", got)
	}
}
