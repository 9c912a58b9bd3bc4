package failures

import (
	"math"
	"math/rand/v2"
)

// Event is one interruption: at T, on Node (an index into the GPU counts
// the schedule was drawn for). A Hardware event takes the node out; the
// others restart the job running there in place.
type Event struct {
	T        int64 `json:"t"`
	Node     int   `json:"node"`
	Hardware bool  `json:"hardware"`
}

// Schedule draws the interruptions of [0, horizon] from seed: a Poisson
// process of rate m.Rate() per GPU on every node (gpus[i] GPUs on node i),
// the same for every policy whatever runs where; an interruption is
// hardware with probability m.HardwareShare. Sorted by time, then node.
//
// Striking every node, busy or not, keeps the schedule independent of the
// policy: an interruption on an idle node only matters when it is hardware
// (the node is out for the repair time).
func Schedule(seed uint64, m Model, gpus []int, horizon int64) []Event {
	total := 0
	for _, g := range gpus {
		total += max(g, 0)
	}
	rate := m.Rate() * float64(total) // per second, whole cluster
	if rate <= 0 || horizon <= 0 {
		return nil
	}
	r := rand.New(rand.NewPCG(seed, 0x6661696c)) // "fail"
	var out []Event
	t := 0.0
	for {
		t += r.ExpFloat64() / rate
		at := int64(math.Round(t))
		if at > horizon {
			return out
		}
		x := r.IntN(total)
		node := 0
		for ; x >= max(gpus[node], 0); node++ {
			x -= max(gpus[node], 0)
		}
		out = append(out, Event{T: at, Node: node, Hardware: r.Float64() < m.HardwareShare})
	}
}
