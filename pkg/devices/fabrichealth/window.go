package fabrichealth

import (
	"math"
	"sort"
	"time"
)

// maxEntries bounds the increases kept per device and counter; past it the
// two oldest merge (at the newer time, so the merged errors stay in the
// window a little longer, never shorter).
const maxEntries = 64

// Config says how long the window is and when a device is tainted.
type Config struct {
	// Window is how far back increases count.
	Window time.Duration
	// Threshold taints a device whose errors in the window reach it; 0
	// never taints.
	Threshold int64
}

// Health is one device's fabric health.
type Health struct {
	// Errors is the sum of every counter's increase in the window.
	Errors int64
	// Counter is the counter with the largest increase in the window (the
	// first in name order on a tie); "" when none rose.
	Counter string
	// Increase is Counter's increase in the window.
	Increase int64
	// Tainted is Errors >= Config.Threshold (Threshold > 0).
	Tainted bool
}

type rawKey struct {
	device, counter string
	link            int
}

type winKey struct{ device, counter string }

type entry struct {
	at time.Time
	n  uint64
}

// Tracker keeps the counters' last values and their increases over the
// window. It is not safe for concurrent use.
type Tracker struct {
	cfg  Config
	last map[rawKey]uint64
	win  map[winKey][]entry
}

// NewTracker returns a Tracker with no baseline.
func NewTracker(cfg Config) *Tracker {
	return &Tracker{cfg: cfg, last: map[rawKey]uint64{}, win: map[winKey][]entry{}}
}

// Config returns the tracker's settings.
func (t *Tracker) Config() Config { return t.cfg }

// Observe adds one sample taken at now and returns the health of every
// device in it. Counters not in the sample are forgotten (their next
// reading is a new baseline); windows of forgotten devices go with them.
func (t *Tracker) Observe(now time.Time, sample []Reading) map[string]Health {
	seen := make(map[rawKey]bool, len(sample))
	live := map[winKey]bool{}
	for _, r := range sample {
		k := rawKey{r.Device, r.Counter, r.Link}
		if seen[k] {
			continue // a duplicate reading counts once
		}
		seen[k] = true
		wk := winKey{r.Device, r.Counter}
		live[wk] = true
		prev, ok := t.last[k]
		t.last[k] = r.Value
		if !ok {
			continue // baseline
		}
		if d := Increase(prev, r.Value); d > 0 {
			t.win[wk] = push(t.win[wk], entry{at: now, n: d})
		}
	}
	for k := range t.last {
		if !seen[k] {
			delete(t.last, k)
		}
	}
	out := map[string]Health{}
	for _, r := range sample {
		out[r.Device] = Health{}
	}
	keys := make([]winKey, 0, len(t.win))
	for wk := range t.win {
		keys = append(keys, wk)
	}
	sort.Slice(keys, func(i, j int) bool {
		return keys[i].device < keys[j].device || keys[i].device == keys[j].device && keys[i].counter < keys[j].counter
	})
	for _, wk := range keys {
		es := expire(t.win[wk], now.Add(-t.cfg.Window))
		if len(es) == 0 || !live[wk] {
			delete(t.win, wk)
			continue
		}
		t.win[wk] = es
		out[wk.device] = add(out[wk.device], wk.counter, sum(es))
	}
	for dev, h := range out {
		h.Tainted = t.cfg.Threshold > 0 && h.Errors >= t.cfg.Threshold
		out[dev] = h
	}
	return out
}

// Increase is a counter's increase from prev to cur: cur-prev, or cur when
// cur is lower (the counter was reset, or wrapped).
func Increase(prev, cur uint64) uint64 {
	if cur < prev {
		return cur
	}
	return cur - prev
}

func push(es []entry, e entry) []entry {
	if len(es) >= maxEntries {
		es[1].n = satAdd(es[0].n, es[1].n)
		es = append(es[:0], es[1:]...)
	}
	return append(es, e)
}

// expire drops the entries at or before from.
func expire(es []entry, from time.Time) []entry {
	i := 0
	for i < len(es) && !es[i].at.After(from) {
		i++
	}
	return append(es[:0], es[i:]...)
}

func sum(es []entry) uint64 {
	var s uint64
	for _, e := range es {
		s = satAdd(s, e.n)
	}
	return s
}

// add folds a counter's increase into a device's health; keys arrive in
// counter name order, so the first of equal increases stays.
func add(h Health, counter string, n uint64) Health {
	v := toInt64(n)
	h.Errors = toInt64(satAdd(uint64(h.Errors), uint64(v)))
	if v > h.Increase {
		h.Counter, h.Increase = counter, v
	}
	return h
}

func satAdd(a, b uint64) uint64 {
	if a > math.MaxUint64-b {
		return math.MaxUint64
	}
	return a + b
}

func toInt64(n uint64) int64 {
	if n > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(n)
}
