package segment

import "sort"

// share is one chosen bin and how many free segments it takes.
type share struct {
	bin, count int
}

// choose returns the bins (indexes into fit and ids) that hold want
// segments, in the order to fill them, with their counts: the fewest bins
// (k, the count of the largest ones needed), each pick the bin with the
// least room that, with the largest others left, still holds what is left
// (the last pick the smallest that completes it). Ties go to the smaller
// id. Nil when the bins hold fewer than want.
func choose(fit []int, ids []string, want int) []share {
	if want <= 0 {
		return nil
	}
	avail := make([]int, 0, len(fit)) // largest first
	for i, f := range fit {
		if f > 0 {
			avail = append(avail, i)
		}
	}
	sort.SliceStable(avail, func(a, b int) bool {
		fa, fb := fit[avail[a]], fit[avail[b]]
		if fa != fb {
			return fa > fb
		}
		return ids[avail[a]] < ids[avail[b]]
	})
	k, sum := 0, 0
	for ; sum < want && k < len(avail); k++ {
		sum += fit[avail[k]]
	}
	if sum < want {
		return nil
	}
	var out []share
	for left := want; left > 0; k-- {
		pick := fullestFeasible(fit, avail, k-1, left)
		b := avail[pick]
		c := min(fit[b], left)
		out = append(out, share{bin: b, count: c})
		left -= c
		avail = append(avail[:pick], avail[pick+1:]...)
	}
	return out
}

// fullestFeasible returns the position in avail (largest first) of the bin
// with the least room that, with the after largest others, still holds
// left; the largest when none does. Among equal rooms the first (smaller
// id) wins.
func fullestFeasible(fit []int, avail []int, after, left int) int {
	after = max(0, min(after, len(avail)-1))
	top := 0 // room of the after largest
	for i := 0; i < after; i++ {
		top += fit[avail[i]]
	}
	pick := 0
	for i := len(avail) - 1; i >= 0; i-- {
		others := top // the after largest, i not among them
		if i < after {
			others = top - fit[avail[i]] + fit[avail[after]]
		}
		if fit[avail[i]]+others >= left {
			pick = i
			break
		}
	}
	for pick > 0 && fit[avail[pick-1]] == fit[avail[pick]] {
		pick--
	}
	return pick
}
