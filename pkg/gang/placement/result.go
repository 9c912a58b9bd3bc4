package placement

import (
	"fmt"
	"sort"
	"strings"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpufabric/gpufabric/pkg/topology"
)

// Decision is a placement for a whole gang.
type Decision struct {
	Gang string
	// TopologyKey and Domain say where the gang landed.
	TopologyKey string
	Domain      string
	// Spread is how the members are split over the domains of every level
	// below Domain, outermost first (down to the NVLink domain).
	Spread []LevelSpread
	// Pods in member order.
	Pods []PodPlacement
	// Claims: the shared claims first (gang order), then each member's.
	Claims []ClaimAllocation
	Score  Score
	Stats  Stats
	// Warnings about the gang's spec that did not stop the placement (a
	// preferred topology key no node carries).
	Warnings []string
	// FabricHealth says when fabric health decided a large gang's domain
	// (Config.LargeGangGPUs, fabricrank.Note); "" otherwise.
	FabricHealth string
	// Segments of a segmented gang (Gang.SegmentSize), in rank order: the
	// domain of SegmentTopologyKey each placed segment is in.
	SegmentTopologyKey string
	Segments           []SegmentPlacement
}

// PodPlacement binds one member to a node.
type PodPlacement struct {
	Namespace string
	Name      string
	UID       types.UID
	Node      string
}

// ClaimAllocation is the allocation to write into one claim's status.
type ClaimAllocation struct {
	Namespace string
	Name      string
	UID       types.UID
	// Shared claims are reserved for the PodGroup; the others for Pod.
	Shared     bool
	Pod        string
	Allocation resourceapi.AllocationResult
}

// Score explains why the domain won. Lower is better, compared in field
// order, then by domain id.
type Score struct {
	// LeftoverDevices of the gang's main device class in the domain after
	// placement (best fit keeps large domains whole).
	LeftoverDevices int
	// RailSets is how many distinct sets of IB rails the members use (a
	// member's set: the rails of its GPUs and NICs, counted when one of its
	// GPUs has a rail); 1 is aligned, 0 means no GPU has a rail.
	RailSets int
}

// Stats are counters of one Place call.
type Stats struct {
	AllocateCalls   int
	MaxAllocate     time.Duration
	DomainsVerified int
	// Searches counts the searches run where the greedy fill failed
	// (search.go); SearchCalls their Allocate calls (included in
	// AllocateCalls); SearchCutoffs the searches stopped by the budget,
	// whose domain was refused without a full answer.
	Searches      int
	SearchCalls   int
	SearchCutoffs int
	// RailFollowCalls counts the Allocate calls (included in
	// AllocateCalls) made to put members' NICs on their GPUs' rails
	// (pkg/gang/placement/rails, follow.go); RailRefills the rail sets verified by placing the
	// gang again (rails.go); RailCutoffs the rail searches stopped by their
	// budget (rail sets counted, verified, or tried for one member on one
	// node).
	RailFollowCalls int
	RailRefills     int
	RailCutoffs     int
	// SegmentPlaces counts the segment bins verified (segments.go);
	// SegmentCutoffs the domains whose segment plan ran out of its budget.
	SegmentPlaces  int
	SegmentCutoffs int
	// Remembered counts the Allocate calls not made because the gang's
	// Memory held their answer (allocator.go); TimedOutCalls the calls
	// that ran out of index.Config.AllocateTimeout.
	Remembered    int
	TimedOutCalls int
}

func (st *Stats) record(d time.Duration) {
	st.AllocateCalls++
	st.MaxAllocate = max(st.MaxAllocate, d)
}

// refusals records what one Place call refused: per check, the nodes (by
// name) or domains (by id) it refused, for Unschedulable.NodeChecks and
// the explanations.
type refusals map[string]map[string]bool

// add records that check refused the node or domain id.
func (r refusals) add(check, id string) {
	if r[check] == nil {
		r[check] = map[string]bool{}
	}
	r[check][id] = true
}

// has reports whether check refused the node or domain id.
func (r refusals) has(check, id string) bool { return r[check][id] }

// in reports whether check refused one of the domain's nodes.
func (r refusals) in(check string, d *topology.Domain) bool { return r.countIn(check, d) > 0 }

// countIn counts the domain's nodes that check refused.
func (r refusals) countIn(check string, d *topology.Domain) int {
	n := 0
	for _, node := range d.Nodes {
		if r[check][node] {
			n++
		}
	}
	return n
}

// Unschedulable says why a gang fits nowhere, with numbers.
type Unschedulable struct {
	Gang string
	// Message is one line for a PodGroup condition or an event.
	Message string
	// Pods and Devices are what the gang needs: Devices of DeviceClass;
	// at least MinCount of the Pods would do.
	Pods        int
	MinCount    int
	Devices     int
	DeviceClass string
	// SegmentSize members in a row must share a domain of
	// SegmentTopologyKey (0: no segments).
	SegmentSize        int
	SegmentTopologyKey string
	Levels             []LevelReport
	// NodeChecks counts nodes rejected per check for the first member
	// (static and load checks over all nodes; allocator and shared-claim
	// refusals as seen while verifying domains). Sorted by Check.
	NodeChecks []CheckCount
	// Domains explain the domains of the required level that came closest
	// (or the pinned domain): the binding constraint and what would help.
	Domains []DomainRefusal
	Stats   Stats
	// TimedOut, when set, says the Place call spent its budget, or that
	// Allocate calls ran out of time; Message then starts with "timed
	// out:" and names the claim that cost the most (timedout.go).
	TimedOut *TimedOut
}

// LevelReport is what one tried level offered.
type LevelReport struct {
	TopologyKey string
	Domains     int
	// Candidates passed the free-device count filter; Verified were tried
	// with real per-node checks.
	Candidates int
	Verified   int
	// Best is the domain with the most free devices (then the most pods that
	// fit by node checks), or the pinned domain; nil when the level has none.
	Best *DomainReport
	// Pinned: the gang may only join the domain its running members are in.
	Pinned bool
}

// DomainReport is one domain's free capacity.
type DomainReport struct {
	ID          string
	FreeDevices int
	// PodsFit is how many members fit by node checks and device counts.
	PodsFit int
}

// CheckCount is how many nodes a check rejected.
type CheckCount struct {
	Check string
	Nodes int
}

func sortedChecks(m map[string]int) []CheckCount {
	out := make([]CheckCount, 0, len(m))
	for c, n := range m {
		out = append(out, CheckCount{Check: c, Nodes: n})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Check < out[j].Check })
	return out
}

// message renders the one-line reason, e.g. "needs 16 pods with 64
// gpu.gpufabric.dev devices in one gpufabric.dev/nvlinkDomain; best: 40 free
// devices, room for 10 pods in nvl-a; nodes rejected: 3 untolerated taint".
func (u *Unschedulable) message() string {
	var b strings.Builder
	fmt.Fprintf(&b, "needs %s", plural(u.Pods, "pod"))
	if u.MinCount > 0 && u.MinCount < u.Pods {
		fmt.Fprintf(&b, " (at least %d)", u.MinCount)
	}
	if u.DeviceClass != "" {
		fmt.Fprintf(&b, " with %d %s devices", u.Devices, u.DeviceClass)
	}
	if u.SegmentSize > 0 {
		fmt.Fprintf(&b, " in segments of %d (each in one %s)", u.SegmentSize, u.SegmentTopologyKey)
	}
	for i, l := range u.Levels {
		sep := " in one "
		if i > 0 || u.SegmentSize > 0 {
			sep = "; in one "
		}
		fmt.Fprintf(&b, "%s%s: ", sep, l.TopologyKey)
		if l.Best == nil {
			if l.Domains == 0 {
				b.WriteString("no node carries this label")
			} else {
				b.WriteString("no domain")
			}
			continue
		}
		if l.Pinned {
			fmt.Fprintf(&b, "%s, where the gang runs, has %d free devices with room for %s", l.Best.ID, l.Best.FreeDevices, plural(l.Best.PodsFit, "pod"))
			continue
		}
		fmt.Fprintf(&b, "largest free %d devices with room for %s in %s (%d of %d domains passed counts, %d verified)",
			l.Best.FreeDevices, plural(l.Best.PodsFit, "pod"), l.Best.ID, l.Candidates, l.Domains, l.Verified)
	}
	if len(u.NodeChecks) > 0 {
		b.WriteString("; nodes rejected:")
		for i, c := range u.NodeChecks {
			if i > 0 {
				b.WriteString(",")
			}
			fmt.Fprintf(&b, " %d %s", c.Nodes, c.Check)
		}
	}
	for _, d := range u.Domains {
		fmt.Fprintf(&b, "\n%s %s (%d free, room for %s): %s. To place the gang: %s.", d.TopologyKey, d.Domain, d.FreeDevices, plural(d.PodsFit, "pod"), d.Why, d.Action)
	}
	return b.String()
}

// plural is "1 pod", "2 pods".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
