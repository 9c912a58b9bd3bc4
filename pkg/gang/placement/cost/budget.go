package cost

import (
	"sort"
	"time"
)

// Defaults of a Budget and of the scheduler's time budget.
const (
	// DefaultCalls is Budget.Calls' default: what ~1.5 s of Allocate calls
	// of ordinary claims cost (100-250 µs each, docs/benchmarks.md).
	DefaultCalls = 10000
	// CallsPerMember is added to the call budget per member of the gang:
	// every member needs at least one call.
	CallsPerMember = 8
	// DefaultTime is the scheduler's default time budget per attempt;
	// TimePerMember is added per member (DeadlineFor).
	DefaultTime   = time.Second
	TimePerMember = time.Millisecond
)

// Budget bounds what one placement attempt may spend on Allocate calls.
// The zero value is the default budget without a deadline.
type Budget struct {
	// Calls bounds the attempt's Allocate calls: Calls plus CallsPerMember
	// per member of the gang. 0: DefaultCalls; negative: no bound.
	Calls int
	// Deadline, when set, ends the attempt at the first Allocate call that
	// ends after it, by the allocator's clock (index.Allocation.End). The
	// scheduler sets it per attempt (DeadlineFor). Zero: none.
	Deadline time.Time
}

// DeadlineFor returns the deadline of an attempt for a gang of members
// that starts at start with a time budget of d (0: DefaultTime): d plus
// TimePerMember per member.
func DeadlineFor(start time.Time, d time.Duration, members int) time.Time {
	if d <= 0 {
		d = DefaultTime
	}
	return start.Add(d + time.Duration(members)*TimePerMember)
}

// Limit is the call bound for a gang of members (negative: none).
func (b Budget) Limit(members int) int {
	switch {
	case b.Calls < 0:
		return -1
	case b.Calls == 0:
		return DefaultCalls + CallsPerMember*members
	}
	return b.Calls + CallsPerMember*members
}

// Spent says which bound ended an attempt.
type Spent string

const (
	// NotSpent: the attempt is within its budget.
	NotSpent Spent = ""
	// SpentCalls: the attempt made as many calls as its budget allows.
	SpentCalls Spent = "calls"
	// SpentTime: a call ended after the deadline.
	SpentTime Spent = "time"
)

// Meter counts one attempt's Allocate calls against its Budget and charges
// each call's time to the heaviest claim of the call (Weight), for Blame.
type Meter struct {
	limit    int
	deadline time.Time
	calls    int
	took     time.Duration
	spent    Spent
	charged  map[string]*Blame
}

// Meter starts counting an attempt for a gang of members.
func (b Budget) Meter(members int) *Meter {
	return &Meter{limit: b.Limit(members), deadline: b.Deadline, charged: map[string]*Blame{}}
}

// Allow reports whether the attempt may make one more call; once it may
// not, Spent says why.
func (m *Meter) Allow() bool {
	if m.spent == NotSpent && m.limit >= 0 && m.calls >= m.limit {
		m.spent = SpentCalls
	}
	return m.spent == NotSpent
}

// Record counts a call charged to claim that took took, ended at end (by
// the allocator's clock) and may have run out of time.
func (m *Meter) Record(claim string, took time.Duration, end time.Time, timedOut bool) {
	m.calls++
	m.took += took
	b := m.charge(claim)
	b.Calls++
	b.Took += took
	if timedOut {
		b.TimedOut++
	}
	if !m.deadline.IsZero() && end.After(m.deadline) && m.spent == NotSpent {
		m.spent = SpentTime
	}
}

// Remembered counts a call not made because a Memory holds its answer.
func (m *Meter) Remembered(claim string, v Verdict) {
	if v == TimedOut {
		m.charge(claim).Remembered++
	}
}

func (m *Meter) charge(claim string) *Blame {
	b := m.charged[claim]
	if b == nil {
		b = &Blame{Claim: claim}
		m.charged[claim] = b
	}
	return b
}

// Spent reports which bound the attempt reached (NotSpent: none).
func (m *Meter) Spent() Spent { return m.spent }

// Calls returns the calls made; Limit the call bound (negative: none);
// Took the allocator time they took.
func (m *Meter) Calls() int          { return m.calls }
func (m *Meter) Limit() int          { return m.limit }
func (m *Meter) Took() time.Duration { return m.took }

// Blame is what the calls charged to one claim cost.
type Blame struct {
	// Claim is the claim's namespace-local name (ShortName).
	Claim string
	Took  time.Duration
	Calls int
	// TimedOut counts its calls that ran out of time, Remembered those not
	// made because the gang's Memory holds a timeout for them.
	TimedOut, Remembered int
}

// Blame returns the claim that cost the attempt the most: of the claims
// with timeouts (made or remembered) if there are any, the most time, then
// the most timeouts, then the smaller name; ok false when no call was
// charged.
func (m *Meter) Blame() (Blame, bool) {
	all := make([]*Blame, 0, len(m.charged))
	for _, b := range m.charged {
		all = append(all, b)
	}
	if len(all) == 0 {
		return Blame{}, false
	}
	sort.Slice(all, func(i, j int) bool {
		a, b := all[i], all[j]
		if ta, tb := a.TimedOut+a.Remembered > 0, b.TimedOut+b.Remembered > 0; ta != tb {
			return ta
		}
		if a.Took != b.Took {
			return a.Took > b.Took
		}
		if ta, tb := a.TimedOut+a.Remembered, b.TimedOut+b.Remembered; ta != tb {
			return ta > tb
		}
		return a.Claim < b.Claim
	})
	return *all[0], true
}

// TimedOut reports whether a call charged to any claim ran out of time or
// was skipped as a remembered timeout.
func (m *Meter) TimedOut() bool {
	for _, b := range m.charged {
		if b.TimedOut+b.Remembered > 0 {
			return true
		}
	}
	return false
}
