package cost

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestMeterCallBound(t *testing.T) {
	for _, tc := range []struct {
		name    string
		budget  Budget
		members int
		want    int // calls allowed; -1: unbounded
	}{
		{"default", Budget{}, 4, DefaultCalls + 4*CallsPerMember},
		{"set", Budget{Calls: 3}, 1, 3 + CallsPerMember},
		{"none", Budget{Calls: -1}, 1, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := tc.budget.Meter(tc.members)
			n := 0
			for m.Allow() && n < 20000 {
				m.Record("c", time.Millisecond, time.Time{}, false)
				n++
			}
			if tc.want < 0 {
				if n != 20000 || m.Spent() != NotSpent {
					t.Errorf("unbounded meter stopped after %d calls (%q)", n, m.Spent())
				}
				return
			}
			if n != tc.want || m.Spent() != SpentCalls || m.Limit() != tc.want {
				t.Errorf("allowed %d calls (limit %d, spent %q), want %d", n, m.Limit(), m.Spent(), tc.want)
			}
		})
	}
}

// TestMeterDeadline: the deadline is compared with the end times of the
// calls, never with a clock: a call that ends after it spends the budget.
func TestMeterDeadline(t *testing.T) {
	start := time.Unix(100, 0)
	m := Budget{Calls: -1, Deadline: start.Add(time.Second)}.Meter(1)
	for i := 1; i <= 10; i++ {
		if !m.Allow() {
			t.Fatalf("call %d refused before the deadline", i)
		}
		m.Record("c", 100*time.Millisecond, start.Add(time.Duration(i)*100*time.Millisecond), false)
	}
	if !m.Allow() {
		t.Fatal("a call ending at the deadline spent the budget")
	}
	m.Record("c", 100*time.Millisecond, start.Add(1100*time.Millisecond), false)
	if m.Allow() || m.Spent() != SpentTime || m.Calls() != 11 || m.Took() != 1100*time.Millisecond {
		t.Errorf("after a call past the deadline: allow %v, spent %q, calls %d, took %s", m.Allow(), m.Spent(), m.Calls(), m.Took())
	}
}

// TestMeterBlame: the claims with timeouts (made or remembered) first,
// then the most time, then the most timeouts, then the name.
func TestMeterBlame(t *testing.T) {
	m := Budget{}.Meter(1)
	if _, ok := m.Blame(); ok || m.TimedOut() {
		t.Fatal("blame without calls")
	}
	m.Record("fast-but-many", 900*time.Millisecond, time.Time{}, false)
	m.Remembered("slow", TimedOut)
	m.Remembered("refused", Refused) // a remembered refusal is no timeout
	if b, _ := m.Blame(); b.Claim != "slow" || b.Remembered != 1 || !m.TimedOut() {
		t.Errorf("blame %+v, want the claim with a remembered timeout", b)
	}
	m.Record("slower", 200*time.Millisecond, time.Time{}, true)
	if b, _ := m.Blame(); b.Claim != "slower" || b.TimedOut != 1 || b.Took != 200*time.Millisecond || b.Calls != 1 {
		t.Errorf("blame %+v, want the timed-out claim with the most time", b)
	}
}

func TestMemoryRemembers(t *testing.T) {
	m := NewMemory()
	m.Begin("env")
	refused, timedOut := KeyOf("r", "node-a"), KeyOf("t", "shape-1")
	m.Record(refused, Refused, "c1")
	m.Record(timedOut, TimedOut, "c2")
	if v, _ := m.Lookup(timedOut); v != Unknown {
		t.Fatal("one timeout counted: it may be the machine's")
	}
	m.Record(timedOut, TimedOut, "c2")
	m.Record(KeyOf("u"), Unknown, "c3")
	if v, c := m.Lookup(refused); v != Refused || c != "c1" || m.Len() != 2 {
		t.Fatalf("lookup %v %q, len %d", v, c, m.Len())
	}
	for i := 1; i < TimedOutAttempts; i++ {
		m.Begin("env")
		if v, _ := m.Lookup(timedOut); v != TimedOut {
			t.Fatalf("attempt %d: timeout forgotten", i)
		}
	}
	m.Begin("env")
	if v, _ := m.Lookup(timedOut); v != Unknown {
		t.Errorf("timeout kept past %d attempts", TimedOutAttempts)
	}
	if v, _ := m.Lookup(refused); v != Refused {
		t.Error("a refusal (exact) expired")
	}
	m.Begin("other env")
	if m.Len() != 0 {
		t.Errorf("a new allocator key kept %d verdicts", m.Len())
	}
}

// TestMemoryBound: at MaxEntries the oldest verdict goes first.
func TestMemoryBound(t *testing.T) {
	m := NewMemory()
	m.Begin("env")
	for i := range MaxEntries + 10 {
		m.Record(KeyOf(fmt.Sprint(i)), Refused, "c")
	}
	if m.Len() != MaxEntries {
		t.Fatalf("len %d, want %d", m.Len(), MaxEntries)
	}
	if v, _ := m.Lookup(KeyOf("9")); v != Unknown {
		t.Error("an old verdict stayed past the bound")
	}
	if v, _ := m.Lookup(KeyOf(fmt.Sprint(MaxEntries + 9))); v != Refused {
		t.Error("the newest verdict was dropped")
	}
	m.Record(KeyOf(fmt.Sprint(MaxEntries+9)), TimedOut, "c") // an update takes no room
	if m.Len() != MaxEntries {
		t.Errorf("len %d after an update", m.Len())
	}
}

// TestMemoriesBound: only memories that hold verdicts take room; at the
// store's size the least recently used goes.
func TestMemoriesBound(t *testing.T) {
	s := NewMemories(2)
	full := func(gang string) *Memory {
		m := s.For(gang)
		m.Begin("env")
		m.Record(KeyOf(gang), Refused, "c")
		s.Keep(gang, m)
		return m
	}
	a := full("a")
	s.Keep("empty", s.For("empty"))
	if s.Len() != 1 {
		t.Fatalf("len %d: an empty memory took room", s.Len())
	}
	full("b")
	if s.For("a") != a {
		t.Fatal("a gang got a new memory")
	}
	full("c") // drops b, the least recently used
	if s.Len() != 2 || s.For("a") != a || s.For("b").Len() != 0 {
		t.Errorf("len %d; a dropped or b kept", s.Len())
	}
	s.Forget("a")
	if s.For("a") == a {
		t.Error("a forgotten gang kept its memory")
	}
}

func TestKeyOfParts(t *testing.T) {
	a, again := KeyOf("a", "b"), KeyOf("a", "b")
	if KeyOf("ab", "c") == KeyOf("a", "bc") || a != again {
		t.Error("keys collide by concatenation, or are not stable")
	}
}

func TestShortName(t *testing.T) {
	if got := ShortName("claim"); got != "claim" {
		t.Errorf("short name cut: %q", got)
	}
	long := strings.Repeat("é", 100)
	got := ShortName(long)
	if n := len([]rune(got)); n != MaxNameLen || !strings.HasSuffix(got, "…") {
		t.Errorf("cut to %d runes: %q", n, got)
	}
}
