package segment

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestChoose(t *testing.T) {
	tests := map[string]struct {
		fit  []int
		want int
		// picks as "bin:count".
		out []string
	}{
		"one bin fits: the smallest that does": {fit: []int{4, 2, 3}, want: 2, out: []string{"1:2"}},
		"two of four, full ones":               {fit: []int{4, 4, 4, 4}, want: 8, out: []string{"0:4", "1:4"}},
		"fewest bins, fullest first":           {fit: []int{4, 4, 3, 2}, want: 5, out: []string{"3:2", "2:3"}},
		"the largest when needed":              {fit: []int{1, 6, 2}, want: 7, out: []string{"0:1", "1:6"}},
		"too few":                              {fit: []int{1, 1}, want: 3},
		"empty bins are never chosen":          {fit: []int{0, 0, 3}, want: 3, out: []string{"2:3"}},
		"ties go to the smaller id":            {fit: []int{2, 2, 2}, want: 2, out: []string{"0:2"}},
		"nothing wanted":                       {fit: []int{2}, want: 0},
		"three bins, rest in the smallest fit": {fit: []int{3, 3, 3, 1}, want: 7, out: []string{"3:1", "0:3", "1:3"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			ids := make([]string, len(tc.fit))
			for i := range ids {
				ids[i] = fmt.Sprintf("b%d", i)
			}
			var got []string
			for _, s := range choose(tc.fit, ids, tc.want) {
				got = append(got, fmt.Sprintf("%d:%d", s.bin, s.count))
			}
			if diff := cmp.Diff(tc.out, got); diff != "" {
				t.Errorf("choose(%v, %d) (-want +got):\n%s", tc.fit, tc.want, diff)
			}
		})
	}
}

// capVerifier verifies a pick when its bin's true capacity holds its
// segments (bins answer independently), and records the calls.
type capVerifier struct {
	capacity []int
	kept     []Pick
	calls    []string
}

func (v *capVerifier) Keep(n int) { v.kept = v.kept[:n] }

func (v *capVerifier) Place(_ context.Context, p Pick) (bool, error) {
	v.calls = append(v.calls, fmt.Sprintf("%d:%v", p.Bin, p.Segments))
	if len(p.Segments) > v.capacity[p.Bin] {
		return false, nil
	}
	v.kept = append(v.kept, p)
	return true, nil
}

func TestPlanLowersCountsAndKeepsPrefix(t *testing.T) {
	// Counts say 4, 4, 2; bin a really holds 3. Four segments go to a
	// (the smaller id of the two that hold them), which fails; its count
	// drops to 3 and the plan made again puts them in b.
	v := &capVerifier{capacity: []int{3, 4, 2}}
	res, err := Plan(context.Background(), Request{
		Bins: []Bin{{ID: "a", Fit: 4}, {ID: "b", Fit: 4}, {ID: "c", Fit: 2}},
		Free: []int{0, 1, 2, 3}, AtLeast: 4, MaxPlaces: 10,
	}, v)
	if err != nil {
		t.Fatal(err)
	}
	if res.Placed != 4 || len(res.Picks) != 1 || res.Picks[0].Bin != 1 {
		t.Fatalf("result %+v, want all 4 segments in bin b", res)
	}
	if diff := cmp.Diff([]string{"0:[0 1 2 3]", "1:[0 1 2 3]"}, v.calls); diff != "" {
		t.Errorf("calls (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]int{3, 4, 2}, res.Fits); diff != "" {
		t.Errorf("fits (-want +got):\n%s", diff)
	}
}

func TestPlanPinnedFirst(t *testing.T) {
	v := &capVerifier{capacity: []int{1, 3, 1}}
	res, err := Plan(context.Background(), Request{
		Bins: []Bin{{ID: "a", Fit: 2}, {ID: "b", Fit: 3, Pinned: []int{1}}, {ID: "c", Fit: 1}},
		Free: []int{0, 2, 3}, AtLeast: 3, MaxPlaces: 10,
	}, v)
	if err != nil {
		t.Fatal(err)
	}
	if res.Placed != 3 {
		t.Fatalf("result %+v, want 3 free segments placed", res)
	}
	if res.Picks[0].Bin != 1 || !slices.Contains(res.Picks[0].Segments, 1) {
		t.Errorf("first pick %+v, want bin b with its pinned segment 1", res.Picks[0])
	}
	checkPicks(t, res, v.capacity, []int{0, 2, 3}, map[int]int{1: 1})
}

func TestPlanPinnedFails(t *testing.T) {
	v := &capVerifier{capacity: []int{0, 5}}
	res, err := Plan(context.Background(), Request{
		Bins: []Bin{{ID: "a", Fit: 1, Pinned: []int{0}}, {ID: "b", Fit: 5}},
		Free: []int{1}, AtLeast: 1, MaxPlaces: 10,
	}, v)
	if err != nil {
		t.Fatal(err)
	}
	if res.Found || res.PinnedFailed != 0 {
		t.Errorf("result %+v, want no placement and bin a's pinned segment failed", res)
	}
}

func TestPlanBudget(t *testing.T) {
	v := &capVerifier{capacity: []int{0, 0, 0, 0}}
	res, err := Plan(context.Background(), Request{
		Bins: []Bin{{ID: "a", Fit: 3}, {ID: "b", Fit: 3}, {ID: "c", Fit: 3}, {ID: "d", Fit: 3}},
		Free: []int{0, 1}, AtLeast: 2, MaxPlaces: 3,
	}, v)
	if err != nil {
		t.Fatal(err)
	}
	if res.Found || !res.Cutoff || res.Places != 3 {
		t.Errorf("result %+v, want a cut-off after 3 places", res)
	}
}

// TestPlanVsBruteForce: with counts at or above what bins hold and bins
// that answer independently, Plan places min(free, total capacity)
// segments exactly when that is at least AtLeast, every pick within its
// bin's capacity and every segment once.
func TestPlanVsBruteForce(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 25))
	for i := range 2000 {
		n := 1 + r.IntN(6)
		capacity := make([]int, n)
		bins := make([]Bin, n)
		pinned := map[int]int{}
		seg := 0
		total := 0
		for b := range n {
			capacity[b] = r.IntN(5)
			bins[b] = Bin{ID: fmt.Sprintf("b%d", r.IntN(3)) + fmt.Sprint(b), Fit: capacity[b] + r.IntN(3)}
			if r.IntN(4) == 0 {
				bins[b].Pinned = []int{seg}
				pinned[seg] = b
				seg++
				capacity[b]++ // room for the pinned one
			}
			total += capacity[b] - len(bins[b].Pinned)
		}
		var free []int
		for range r.IntN(8) {
			free = append(free, seg)
			seg++
		}
		atLeast := r.IntN(len(free) + 1)
		v := &capVerifier{capacity: capacity}
		res, err := Plan(context.Background(), Request{Bins: bins, Free: free, AtLeast: atLeast, MaxPlaces: 1000}, v)
		if err != nil {
			t.Fatal(err)
		}
		want := min(len(free), total)
		if res.Found != (want >= atLeast) || res.Cutoff {
			t.Fatalf("case %d: bins %+v capacity %v free %v atLeast %d: result %+v, want %d placed", i, bins, capacity, free, atLeast, res, want)
		}
		if !res.Found {
			continue
		}
		if res.Placed != want {
			t.Fatalf("case %d: placed %d, want %d", i, res.Placed, want)
		}
		checkPicks(t, res, capacity, free[:want], pinned)
	}
}

// checkPicks: every pick within capacity, each wanted free segment once,
// pinned segments in their bins.
func checkPicks(t *testing.T, res Result, capacity, free []int, pinned map[int]int) {
	t.Helper()
	seen := map[int]int{}
	for _, p := range res.Picks {
		if len(p.Segments) > capacity[p.Bin] {
			t.Fatalf("pick %+v over capacity %d", p, capacity[p.Bin])
		}
		for _, s := range p.Segments {
			if _, dup := seen[s]; dup {
				t.Fatalf("segment %d placed twice", s)
			}
			seen[s] = p.Bin
		}
	}
	for s, b := range pinned {
		if got, ok := seen[s]; !ok || got != b {
			t.Fatalf("pinned segment %d in bin %d (placed %t), want %d", s, got, ok, b)
		}
	}
	for _, s := range free {
		if _, ok := seen[s]; !ok {
			t.Fatalf("free segment %d not placed; picks %+v", s, res.Picks)
		}
	}
	if len(seen) != len(free)+len(pinned) {
		t.Fatalf("%d segments placed, want %d", len(seen), len(free)+len(pinned))
	}
}
