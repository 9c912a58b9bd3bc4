package placement

import (
	"fmt"
	"strings"
	"time"

	"github.com/gpufabric/gpufabric/pkg/gang/placement/cost"
)

// TimedOut says that a Place call was cut short by its budget
// (Config.Budget), or that Allocate calls ran out of time while it looked
// (made, or skipped because the gang's Memory holds a timeout for them),
// and which claim cost the most.
type TimedOut struct {
	// Spent is the bound that ended the Place call: cost.SpentCalls or
	// cost.SpentTime; cost.NotSpent when it ran to its end.
	Spent cost.Spent
	// Calls is how many Allocate calls it made; Limit its call bound
	// (negative: none).
	Calls, Limit int
	// Blame is the claim that cost the most (its name is cut to
	// cost.MaxNameLen).
	Blame cost.Blame
}

// timedOut is the Unschedulable of a Place call that spent its budget: it
// has no level reports past the ones done and no explanation, only what
// the budget went to.
func (p *placer) timedOut() *Unschedulable {
	u := &Unschedulable{Gang: p.g.Key(), Pods: len(p.g.Members), MinCount: p.g.MinCount, Devices: p.need, DeviceClass: p.class, Levels: p.reports, Stats: *p.stats}
	p.markTimedOut(u)
	return u
}

// markTimedOut sets u.TimedOut and puts the timeout first in its message.
func (p *placer) markTimedOut(u *Unschedulable) {
	u.Stats = *p.stats
	b, _ := p.meter.Blame()
	u.TimedOut = &TimedOut{Spent: p.meter.Spent(), Calls: p.meter.Calls(), Limit: p.meter.Limit(), Blame: b}
	msg := u.TimedOut.message(p.meter)
	if u.Message != "" {
		msg += "\n" + u.Message
	}
	u.Message = msg
}

// message is the first line of a timed-out refusal, e.g. `timed out: the
// attempt stopped after 10008 allocator calls (its budget); claim "big"
// cost 1.2s in 12 calls (12 ran out of time), 40 calls skipped (nodes of
// the same shape ran out of time before); simplify the claim's
// selectors`. Its length is bounded: the claim's name is cut.
func (t *TimedOut) message(m *cost.Meter) string {
	var b strings.Builder
	b.WriteString("timed out: ")
	switch t.Spent {
	case cost.SpentCalls:
		fmt.Fprintf(&b, "the attempt stopped after %d allocator calls (its budget)", t.Calls)
	case cost.SpentTime:
		fmt.Fprintf(&b, "the attempt stopped after %s of allocator calls (%d calls, past its time budget)", round(m.Took()), t.Calls)
	default:
		b.WriteString("allocator calls ran out of time")
	}
	bl := t.Blame
	if bl.Claim == "" {
		return b.String()
	}
	fmt.Fprintf(&b, "; claim %q", bl.Claim)
	if bl.Calls > 0 {
		fmt.Fprintf(&b, " cost %s in %s", round(bl.Took), plural(bl.Calls, "call"))
		if bl.TimedOut > 0 {
			fmt.Fprintf(&b, " (%d ran out of time)", bl.TimedOut)
		}
	}
	if bl.Remembered > 0 {
		sep := ","
		if bl.Calls == 0 {
			sep = ":"
		}
		fmt.Fprintf(&b, "%s %s skipped (nodes of the same shape ran out of time before)", sep, plural(bl.Remembered, "call"))
	}
	b.WriteString("; simplify the claim's selectors")
	return b.String()
}

// round rounds durations of a millisecond or more to 0.1 ms.
func round(d time.Duration) time.Duration {
	if d >= time.Millisecond {
		return d.Round(100 * time.Microsecond)
	}
	return d.Round(time.Microsecond)
}
