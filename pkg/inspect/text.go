package inspect

import (
	"fmt"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"k8s.io/apimachinery/pkg/util/duration"

	"github.com/gpufabric/gpufabric/pkg/topology"
)

// Style says how tables are drawn.
type Style struct {
	// Color draws the occupancy bars with ANSI colours.
	Color bool
	// BarWidth is the most cells a bar has; a domain with fewer GPUs gets
	// one cell per GPU. 0: DefaultBarWidth.
	BarWidth int
	// Now is the time event ages are computed from.
	Now time.Time
}

// DefaultBarWidth is the widest occupancy bar.
const DefaultBarWidth = 32

// Bar cells: used, tainted, free.
const (
	cellUsed    = "█"
	cellTainted = "▒"
	cellFree    = "░"
	none        = "<none>"
)

var (
	ansiUsed    = "\x1b[33m"
	ansiTainted = "\x1b[31m"
	ansiFree    = "\x1b[32m"
	ansiReset   = "\x1b[0m"
)

// table writes tab-separated rows aligned like kubectl's tables.
type table struct{ tw *tabwriter.Writer }

func newTable(w io.Writer) *table {
	return &table{tw: tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)}
}

func (t *table) row(cells ...string) {
	fmt.Fprintln(t.tw, strings.Join(cells, "\t"))
}

func (t *table) flush() error {
	if err := t.tw.Flush(); err != nil {
		return fmt.Errorf("write table: %w", err)
	}
	return nil
}

// bar draws GPU occupancy: one cell per GPU up to width, else scaled with
// every non-zero count keeping at least one cell. With colour, every bar
// carries the same escape codes so table columns stay aligned.
func bar(c GPUCounts, width int, color bool) string {
	if width <= 0 {
		width = DefaultBarWidth
	}
	cells := scaleCells([]int{c.Used, c.Tainted, c.Free}, c.Total, width)
	var b strings.Builder
	for i, ch := range []string{cellUsed, cellTainted, cellFree} {
		if color {
			b.WriteString([]string{ansiUsed, ansiTainted, ansiFree}[i])
		}
		b.WriteString(strings.Repeat(ch, cells[i]))
	}
	if color {
		b.WriteString(ansiReset)
	}
	if b.Len() == 0 {
		return "-"
	}
	return b.String()
}

// scaleCells maps counts (summing to total) onto at most width cells:
// rounded down, at least one cell for a non-zero count, then the cells
// left go to the largest remainders (or, when the minimums overshoot,
// come off the largest bars).
func scaleCells(counts []int, total, width int) []int {
	out := make([]int, len(counts))
	if total <= width {
		copy(out, counts)
		return out
	}
	sum := 0
	for i, n := range counts {
		out[i] = n * width / total
		if n > 0 && out[i] == 0 {
			out[i] = 1
		}
		sum += out[i]
	}
	taken := make([]bool, len(counts))
	for ; sum < width; sum++ {
		best := -1
		for i, n := range counts {
			if n > 0 && !taken[i] && (best < 0 || n*width%total > counts[best]*width%total) {
				best = i
			}
		}
		if best < 0 {
			best = largest(out)
		}
		taken[best] = true
		out[best]++
	}
	for ; sum > width; sum-- {
		out[largest(out)]--
	}
	return out
}

func largest(v []int) int {
	best := 0
	for i := range v {
		if v[i] > v[best] {
			best = i
		}
	}
	return best
}

// levelHeader names a level in a table header: "NVLINK DOMAIN" for the
// NVLink domain, else the label key's name without prefix, upper case
// ("topology.gpufabric.dev/ib-leaf": "IB-LEAF").
func levelHeader(key string) string {
	if key == topology.TopologyKeyNVLinkDomain {
		return "NVLINK DOMAIN"
	}
	if i := strings.LastIndex(key, "/"); i >= 0 {
		key = key[i+1:]
	}
	return strings.ToUpper(key)
}

// compactInts writes sorted numbers with runs as ranges: "0-3,6".
func compactInts(v []int64) string {
	if len(v) == 0 {
		return none
	}
	var parts []string
	for i := 0; i < len(v); {
		j := i
		for j+1 < len(v) && v[j+1] == v[j]+1 {
			j++
		}
		if j > i {
			parts = append(parts, fmt.Sprintf("%d-%d", v[i], v[j]))
		} else {
			parts = append(parts, strconv.FormatInt(v[i], 10))
		}
		i = j + 1
	}
	return strings.Join(parts, ",")
}

var trailingNumber = regexp.MustCompile(`^(.*?)([0-9]+)$`)

// compactNames writes names that differ only in a trailing number as one
// pattern ("gpu-0", "gpu-1", "gpu-2": "gpu-[0-2]"), in order of first
// appearance, comma-separated.
func compactNames(names []string) string {
	if len(names) == 0 {
		return none
	}
	var prefixes []string
	nums := map[string][]int64{}
	for _, n := range names {
		prefix, num := n, int64(-1)
		if m := trailingNumber.FindStringSubmatch(n); m != nil && (len(m[2]) == 1 || m[2][0] != '0') {
			if v, err := strconv.ParseInt(m[2], 10, 64); err == nil {
				prefix, num = m[1], v
			}
		}
		if _, ok := nums[prefix]; !ok {
			prefixes = append(prefixes, prefix)
		}
		if num >= 0 {
			nums[prefix] = append(nums[prefix], num)
		} else {
			nums[prefix] = append(nums[prefix], -1)
		}
	}
	var parts []string
	for _, p := range prefixes {
		parts = append(parts, compactGroup(p, nums[p]))
	}
	return strings.Join(parts, ",")
}

func compactGroup(prefix string, nums []int64) string {
	var plain, out []string
	var ints []int64
	for _, n := range nums {
		if n < 0 {
			plain = append(plain, prefix)
			continue
		}
		ints = append(ints, n)
	}
	slices.Sort(ints)
	switch len(ints) {
	case 0:
	case 1:
		out = append(out, prefix+strconv.FormatInt(ints[0], 10))
	default:
		out = append(out, prefix+"["+compactInts(ints)+"]")
	}
	return strings.Join(append(out, plain...), ",")
}

// firstLine returns the first line of s, cut to maxLen runes with "...".
func firstLine(s string, maxLen int) string {
	s, _, more := strings.Cut(s, "\n")
	r := []rune(s)
	if len(r) > maxLen {
		return string(r[:maxLen-3]) + "..."
	}
	if more {
		return s + " ..."
	}
	return s
}

// age is how long ago t was, as kubectl prints it ("5s", "3m", "2d").
func age(now, t time.Time) string {
	if t.IsZero() {
		return "<unknown>"
	}
	return duration.HumanDuration(now.Sub(t))
}

func orNone(s string) string {
	if s == "" {
		return none
	}
	return s
}

func plural(n int, one, many string) string {
	if n == 1 {
		return fmt.Sprintf("%d %s", n, one)
	}
	return fmt.Sprintf("%d %s", n, many)
}
