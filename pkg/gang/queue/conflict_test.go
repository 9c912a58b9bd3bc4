package queue

import (
	"testing"
	"time"
)

// TestQueueConflictBackoffGrows: each commit conflict of a gang doubles its
// retry delay (ConflictBackoff, jitter 80-120 %) up to MaxBackoff; placing
// or forgetting the gang starts it over. Before conflicts were backed off,
// a gang whose commit always conflicted was retried every 50-150 ms for
// ever.
func TestQueueConflictBackoffGrows(t *testing.T) {
	gq := New(Config{InitialBackoff: time.Second, MaxBackoff: time.Second, MaxUnschedulableWait: time.Hour,
		ConflictBackoff: 100 * time.Millisecond, Clock: newFakeClock()})
	defer gq.ShutDown()
	bounds := []time.Duration{100, 200, 400, 800, 1000, 1000}
	for i, want := range bounds {
		d := gq.RetryConflict("pg:ns/a")
		lo, hi := want*time.Millisecond*8/10, want*time.Millisecond*12/10
		if d < lo || d > hi {
			t.Errorf("conflict %d: backoff %v not in [%v, %v]", i+1, d, lo, hi)
		}
	}
	gq.Forget("pg:ns/a")
	if d := gq.RetryConflict("pg:ns/a"); d > 120*time.Millisecond {
		t.Errorf("after forget: backoff %v, want ~100ms", d)
	}
	if d := New(Config{MaxBackoff: time.Second}).RetryConflict("k"); d < 80*time.Millisecond || d > 120*time.Millisecond {
		t.Errorf("default conflict backoff: %v, want 80-120ms", d)
	}
}

// TestQueueConflictWaitsItsBackoff: a gang whose commit conflicted is not
// handed out before its conflict backoff ends, even to an idle worker and
// after an event about the gang itself; it is handed out once it ends.
func TestQueueConflictWaitsItsBackoff(t *testing.T) {
	clk := newFakeClock()
	gq := New(Config{InitialBackoff: time.Second, MaxBackoff: 10 * time.Second, MaxUnschedulableWait: time.Hour,
		ConflictBackoff: time.Second, Clock: clk})
	start := clk.Now()
	d := gq.RetryConflict("pg:ns/a")
	gq.Add("pg:ns/a") // its member changed meanwhile
	k, at := nextStepping(t, gq, clk, 100*time.Millisecond, 700*time.Millisecond, 700*time.Millisecond)
	if k != "pg:ns/a" {
		t.Fatalf("got %q after the backoff", k)
	}
	if got := at.Sub(start); got < d {
		t.Fatalf("handed out %v after the conflict, before its backoff of %v", got, d)
	}
}

// TestQueueConflictWakesNoParkedGang: a commit conflict wakes no parked
// gang (before, each conflict flushed every parked gang of the cluster);
// once the conflicting gang's retry ends parked (it did not take the
// devices its decision had assumed back) the others are woken once, and
// not again at its next park; a gang placed after its conflict wakes none.
func TestQueueConflictWakesNoParkedGang(t *testing.T) {
	parked := func(gq *Queue, key string) bool {
		gq.mu.Lock()
		defer gq.mu.Unlock()
		return gq.parked.has(key)
	}
	clk := newFakeClock()
	gq := New(Config{InitialBackoff: 10 * time.Millisecond, MaxBackoff: 10 * time.Millisecond, MaxUnschedulableWait: time.Hour, Clock: clk})
	defer gq.ShutDown()
	gq.Park("pg:ns/other", gq.Cycle())
	for range 5 {
		cycle := gq.Cycle()
		gq.RetryConflict("pg:ns/a")
		if !parked(gq, "pg:ns/other") || gq.Cycle() != cycle {
			t.Fatalf("a conflict woke the parked gangs")
		}
	}
	gq.Park("pg:ns/a", gq.Cycle()) // its retry was refused
	if parked(gq, "pg:ns/other") {
		t.Fatalf("the refused retry after a conflict did not wake the parked gang")
	}
	if !parked(gq, "pg:ns/a") {
		t.Fatalf("the gang's own wake unparked it")
	}
	gq.Park("pg:ns/other", gq.Cycle())
	gq.Park("pg:ns/a", gq.Cycle()) // refused again: nothing owed
	if !parked(gq, "pg:ns/other") {
		t.Fatalf("a second park woke the parked gangs again")
	}

	gq.RetryConflict("pg:ns/b")
	gq.Forget("pg:ns/b") // placed at its retry: it took the devices
	gq.Park("pg:ns/b", gq.Cycle())
	if !parked(gq, "pg:ns/other") {
		t.Fatalf("a gang placed after its conflict woke the parked gangs")
	}
}
