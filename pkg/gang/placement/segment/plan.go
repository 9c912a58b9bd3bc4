package segment

import (
	"context"
	"slices"
)

// Bin is one domain of the segment level inside the gang's domain.
type Bin struct {
	ID string
	// Fit is how many whole free segments the bin holds at most besides
	// its Pinned ones, by counts (an upper bound that verification may
	// lower).
	Fit int
	// Pinned are the segments that must go to this bin (members of theirs
	// run there), ascending.
	Pinned []int
}

// Pick is what one bin is asked to hold: its pinned segments and the free
// ones chosen for it, ascending.
type Pick struct {
	Bin      int
	Segments []int
}

// Verifier places picks in order, each next to those placed before it.
type Verifier interface {
	// Keep drops what was placed for all but the first n picks.
	Keep(n int)
	// Place places the pick after the kept ones and reports whether all
	// its segments fit.
	Place(ctx context.Context, p Pick) (bool, error)
}

// Request is one plan: the bins of one gang domain, the segments free to go
// to any of them, and how many of those must be placed.
type Request struct {
	Bins []Bin
	// Free are the segments to place in any bin, in rank order; when not
	// all fit, the first ones are placed.
	Free []int
	// AtLeast is how many of Free must be placed (len(Free): all).
	AtLeast int
	// MaxPlaces bounds the Verifier.Place calls (at least 1).
	MaxPlaces int
}

// Result is a plan's outcome.
type Result struct {
	// Found says a placement was verified: Picks (every bin with pinned
	// segments, and the bins of the free segments placed), which may be
	// empty when nothing had to be placed.
	Found bool
	Picks []Pick
	// Placed is how many free segments Picks holds.
	Placed int
	// Fits are the bins' counts as verification left them.
	Fits []int
	// Places counts the Verifier.Place calls; Cutoff says MaxPlaces ran
	// out before a placement was found.
	Places int
	Cutoff bool
	// PinnedFailed is the bin whose pinned segments did not fit, or -1.
	PinnedFailed int
}

// Plan chooses bins for the free segments and verifies every pick (see
// the package rules), until all picks verify, too few free segments fit
// by the counts left, a bin's pinned segments do not fit, or the budget
// runs out.
func Plan(ctx context.Context, req Request, v Verifier) (Result, error) {
	res := Result{PinnedFailed: -1, Fits: make([]int, len(req.Bins))}
	ids := make([]string, len(req.Bins))
	for i, b := range req.Bins {
		res.Fits[i], ids[i] = max(b.Fit, 0), b.ID
	}
	var placed []Pick // verified, in order
	for {
		total := 0
		for _, f := range res.Fits {
			total += f
		}
		target := min(len(req.Free), total)
		if target < req.AtLeast {
			return res, nil
		}
		picks := assemble(req, choose(res.Fits, ids, target))
		n := 0
		for n < len(placed) && n < len(picks) && samePick(placed[n], picks[n]) {
			n++
		}
		v.Keep(n)
		placed = placed[:n]
		failed := false
		for _, p := range picks[n:] {
			if res.Places >= max(req.MaxPlaces, 1) {
				res.Cutoff = true
				return res, nil
			}
			res.Places++
			ok, err := v.Place(ctx, p)
			if err != nil {
				return res, err
			}
			if !ok {
				free := len(p.Segments) - len(req.Bins[p.Bin].Pinned)
				if free == 0 {
					res.PinnedFailed = p.Bin
					return res, nil
				}
				res.Fits[p.Bin] = free - 1
				failed = true
				break
			}
			placed = append(placed, p)
		}
		if !failed {
			res.Found, res.Picks, res.Placed = true, placed, target
			return res, nil
		}
	}
}

// assemble makes the picks: every bin with pinned segments first, in bin
// order, then the chosen bins in their order, the free segments dealt in
// rank order; a chosen bin with pinned segments takes its free ones into
// its pinned pick.
func assemble(req Request, shares []share) []Pick {
	var picks []Pick
	at := map[int]int{} // bin → pick
	for i, b := range req.Bins {
		if len(b.Pinned) > 0 {
			at[i] = len(picks)
			picks = append(picks, Pick{Bin: i, Segments: slices.Clone(b.Pinned)})
		}
	}
	next := 0
	for _, sh := range shares {
		segs := req.Free[next : next+sh.count]
		next += sh.count
		if pi, ok := at[sh.bin]; ok {
			picks[pi].Segments = append(picks[pi].Segments, segs...)
			slices.Sort(picks[pi].Segments)
			continue
		}
		picks = append(picks, Pick{Bin: sh.bin, Segments: slices.Clone(segs)})
	}
	return picks
}

func samePick(a, b Pick) bool { return a.Bin == b.Bin && slices.Equal(a.Segments, b.Segments) }
