package trees

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"time"
)

// Stats are one policy's tree numbers over a run: trees arrived by the
// horizon, placed whole (all pods), placed as asked, by kind; segments
// and couples of the placed trees; waits (arrival to start, or to the
// horizon for trees still waiting).
type Stats struct {
	Trees, Placed, AsAsked                       int
	Training, TrainingPlaced, TrainingAsAsked    int
	Inference, InferencePlaced, InferenceAsAsked int
	Segments, SegmentsInDomain                   int
	Couples, CouplesMatched                      int
	Pairs, PairsMatched                          int
	TrainingWaits, InferenceWaits                []int64
	// Refusals: attempts that left a tree unplaced; KubeWouldPlace of
	// them: kube-scheduler's greedy rule (Kube) would have placed the tree
	// on the same free GPUs (KubeFits).
	Refusals, KubeWouldPlace int
}

// Refused counts an attempt that left a tree unplaced.
func (s *Stats) Refused(kubeWould bool) {
	s.Refusals++
	if kubeWould {
		s.KubeWouldPlace++
	}
}

// Started counts a tree placed whole after waiting wait seconds.
func (s *Stats) Started(sp *Spec, o Outcome, wait int64) {
	s.arrived(sp.Kind, wait)
	s.Placed++
	if o.AsAsked {
		s.AsAsked++
	}
	switch sp.Kind {
	case KindTraining:
		s.TrainingPlaced++
		if o.AsAsked {
			s.TrainingAsAsked++
		}
	case KindInference:
		s.InferencePlaced++
		if o.AsAsked {
			s.InferenceAsAsked++
		}
	}
	s.Segments += o.Segments
	s.SegmentsInDomain += o.SegmentsInDomain
	s.Couples += o.Couples
	s.CouplesMatched += o.CouplesMatched
	s.Pairs += o.Pairs
	s.PairsMatched += o.PairsMatched
}

// Waiting counts a tree still waiting at the horizon, for wait seconds.
func (s *Stats) Waiting(sp *Spec, wait int64) { s.arrived(sp.Kind, wait) }

func (s *Stats) arrived(kind string, wait int64) {
	s.Trees++
	switch kind {
	case KindTraining:
		s.Training++
		s.TrainingWaits = append(s.TrainingWaits, wait)
	case KindInference:
		s.Inference++
		s.InferenceWaits = append(s.InferenceWaits, wait)
	}
}

// Row is one policy's line of the tree table.
type Row struct {
	Policy string
	// Config says how the policy expressed the trees.
	Config  string
	Stats   *Stats
	BusyPct float64
	// NoRefusals: the policy places pod by pod (its refusals are not
	// counted); KubeRule: it is kube's greedy rule itself.
	NoRefusals, KubeRule bool
	// Latencies of the policy's tree decisions (wall time).
	Latencies []time.Duration
}

// Markdown writes the tree table.
func Markdown(w io.Writer, rows []Row) error {
	var b strings.Builder
	b.WriteString("| policy | trees placed whole (as asked) | training placed (as asked) | inference placed (as asked) | segments in one NVLink domain | coupled roles on one rail set: services / pod pairs | training wait mean / p99 (min) | inference wait mean / p99 (min) | tree refusals (kube's greedy would place) | tree decision p50 / p99 (ms) | busy GPUs | how the trees are expressed |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range rows {
		s := r.Stats
		refusals := "—"
		switch {
		case r.KubeRule:
			refusals = fmt.Sprintf("%d (—)", s.Refusals)
		case !r.NoRefusals:
			refusals = fmt.Sprintf("%d (%d)", s.Refusals, s.KubeWouldPlace)
		}
		fmt.Fprintf(&b, "| %s | %d / %d (%d) | %d / %d (%d) | %d / %d (%d) | %s | %s / %s | %s | %s | %s | %s | %.1f%% | %s |\n",
			r.Policy, s.Placed, s.Trees, s.AsAsked, s.TrainingPlaced, s.Training, s.TrainingAsAsked,
			s.InferencePlaced, s.Inference, s.InferenceAsAsked, share(s.SegmentsInDomain, s.Segments),
			share(s.CouplesMatched, s.Couples), share(s.PairsMatched, s.Pairs),
			waits(s.TrainingWaits), waits(s.InferenceWaits), refusals, latencies(r.Latencies), r.BusyPct, r.Config)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// share is "a / b = p%", "—" without any.
func share(a, b int) string {
	if b == 0 {
		return "—"
	}
	return fmt.Sprintf("%.1f%% (%d / %d)", 100*float64(a)/float64(b), a, b)
}

// waits is "mean / p99" in minutes (p99 nearest rank), "—" without any.
func waits(v []int64) string {
	if len(v) == 0 {
		return "—"
	}
	s := slices.Clone(v)
	slices.Sort(s)
	var sum int64
	for _, x := range s {
		sum += x
	}
	i := min(max(int(math.Ceil(0.99*float64(len(s))))-1, 0), len(s)-1)
	return fmt.Sprintf("%.1f / %.1f", float64(sum)/float64(len(s))/60, float64(s[i])/60)
}

// latencies is "p50 / p99" in milliseconds (nearest rank), "—" without any.
func latencies(v []time.Duration) string {
	if len(v) == 0 {
		return "—"
	}
	s := slices.Clone(v)
	slices.Sort(s)
	at := func(p float64) float64 {
		return float64(s[min(max(int(math.Ceil(p*float64(len(s))))-1, 0), len(s)-1)]) / 1e6
	}
	return fmt.Sprintf("%.2f / %.2f", at(0.5), at(0.99))
}
