package inspect

import (
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/gpufabric/gpufabric/pkg/topology"
)

func TestCompactInts(t *testing.T) {
	tests := []struct {
		in   []int64
		want string
	}{
		{nil, "<none>"}, {[]int64{3}, "3"}, {[]int64{0, 1, 2, 3}, "0-3"}, {[]int64{0, 2, 3, 4, 7}, "0,2-4,7"}, {[]int64{1, 2}, "1-2"},
	}
	for _, tc := range tests {
		if got := compactInts(tc.in); got != tc.want {
			t.Errorf("compactInts(%v) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestCompactNames(t *testing.T) {
	tests := []struct {
		in   []string
		want string
	}{
		{nil, "<none>"},
		{[]string{"gpu-0"}, "gpu-0"},
		{[]string{"gpu-3", "gpu-0", "gpu-1", "gpu-2"}, "gpu-[0-3]"},
		{[]string{"gpu-0", "gpu-2", "nic-mlx5-1"}, "gpu-[0,2],nic-mlx5-1"},
		{[]string{"big-0", "big-1", "big-2", "train"}, "big-[0-2],train"},
		{[]string{"p-01", "p-02"}, "p-01,p-02"}, // leading zeros are not numbers to merge
		{[]string{"a/b-1", "a/b-2"}, "a/b-[1-2]"},
	}
	for _, tc := range tests {
		if got := compactNames(tc.in); got != tc.want {
			t.Errorf("compactNames(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestBar(t *testing.T) {
	tests := []struct {
		name  string
		c     GPUCounts
		width int
		want  string
	}{
		{"one cell per GPU", GPUCounts{Total: 8, Used: 3, Tainted: 1, Free: 4}, 32, "███▒░░░░"},
		{"empty domain", GPUCounts{}, 32, "-"},
		{"scaled, rounded", GPUCounts{Total: 72, Used: 36, Free: 36}, 8, "████░░░░"},
		{"scaled, a single tainted GPU keeps a cell", GPUCounts{Total: 72, Used: 70, Tainted: 1, Free: 1}, 8, "██████▒░"},
		{"scaled, remainders", GPUCounts{Total: 10, Used: 5, Tainted: 2, Free: 3}, 4, "██▒░"},
		{"default width", GPUCounts{Total: 64, Free: 64}, 0, strings.Repeat("░", 32)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := bar(tc.c, tc.width, false); got != tc.want {
				t.Errorf("bar = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestBarColorKeepsColumns: every coloured bar has the same escape codes,
// so the columns after it stay aligned.
func TestBarColorKeepsColumns(t *testing.T) {
	a := bar(GPUCounts{Total: 4, Used: 4}, 8, true)
	b := bar(GPUCounts{Total: 4, Tainted: 1, Free: 3}, 8, true)
	if !strings.HasPrefix(a, ansiUsed) || !strings.HasSuffix(a, ansiReset) {
		t.Errorf("coloured bar %q lacks its codes", a)
	}
	if utf8.RuneCountInString(a) != utf8.RuneCountInString(b) {
		t.Errorf("bars of equal cells have %d and %d runes: %q %q", utf8.RuneCountInString(a), utf8.RuneCountInString(b), a, b)
	}
}

func TestScaleCells(t *testing.T) {
	for total := 1; total <= 80; total++ {
		for used := 0; used <= total; used++ {
			tainted := (total - used) / 3
			counts := []int{used, tainted, total - used - tainted}
			cells := scaleCells(counts, total, 16)
			sum := 0
			for i, c := range cells {
				sum += c
				if counts[i] > 0 && c == 0 || counts[i] == 0 && c != 0 {
					t.Fatalf("scaleCells(%v, %d) = %v: count %d got %d cells", counts, total, cells, counts[i], c)
				}
			}
			if want := min(total, 16); sum != want {
				t.Fatalf("scaleCells(%v, %d) = %v: %d cells, want %d", counts, total, cells, sum, want)
			}
		}
	}
}

func TestLevelHeaderAndLines(t *testing.T) {
	for in, want := range map[string]string{
		topology.TopologyKeyNVLinkDomain: "NVLINK DOMAIN", "topology.gpufabric.dev/ib-leaf": "IB-LEAF", "rack": "RACK",
	} {
		if got := levelHeader(in); got != want {
			t.Errorf("levelHeader(%q) = %q, want %q", in, got, want)
		}
	}
	for _, tc := range []struct{ in, want string }{
		{"short", "short"}, {"two\nlines", "two ..."}, {strings.Repeat("x", 30), strings.Repeat("x", 17) + "..."},
	} {
		if got := firstLine(tc.in, 20); got != tc.want {
			t.Errorf("firstLine(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	if got := age(testNow, testNow.Add(-90*time.Second)); got != "90s" {
		t.Errorf("age = %q, want 90s", got)
	}
	if got := age(testNow, time.Time{}); got != "<unknown>" {
		t.Errorf("age of zero time = %q", got)
	}
}
