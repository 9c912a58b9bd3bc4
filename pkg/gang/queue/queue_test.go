package queue

import (
	"testing"
	"time"

	testingclock "k8s.io/utils/clock/testing"
)

// newQueue returns a Queue with these backoffs on clk (nil: the real
// clock).
func newQueue(initial, maxBackoff, maxWait time.Duration, clk *testingclock.FakeClock) *Queue {
	cfg := Config{InitialBackoff: initial, MaxBackoff: maxBackoff, MaxUnschedulableWait: maxWait}
	if clk != nil {
		cfg.Clock = clk
	}
	return New(cfg)
}

func newFakeClock() *testingclock.FakeClock { return testingclock.NewFakeClock(time.Unix(1000, 0)) }

// next returns the key the queue hands out within d, or "".
func next(t *testing.T, gq *Queue, d time.Duration) string {
	t.Helper()
	got := make(chan string, 1)
	go func() {
		k, _ := gq.Get()
		got <- k
	}()
	select {
	case k := <-got:
		gq.Done(k)
		return k
	case <-time.After(d):
		gq.ShutDown() // unblocks the getter; the queue is not reused
		<-got
		return ""
	}
}

// waitIdle returns once the worker waits in Get (or got a key): a fake
// clock is stepped only then (doc.go, lock order).
func waitIdle(t *testing.T, gq *Queue, got chan string) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		gq.mu.Lock()
		idle := gq.idle
		gq.mu.Unlock()
		if idle || len(got) > 0 {
			return
		}
	}
	t.Fatal("the worker never waited in Get")
}

// nextStepping is next for a queue on clk: the worker asks, then clk
// advances by each of steps in turn; before the first step and after
// each, it waits up to wait for a key. It returns the key ("" once steps
// are spent; the queue is not reused) and clk's time when it was handed
// out.
func nextStepping(t *testing.T, gq *Queue, clk *testingclock.FakeClock, wait time.Duration, steps ...time.Duration) (string, time.Time) {
	t.Helper()
	got := make(chan string, 1)
	go func() {
		k, _ := gq.Get()
		got <- k
	}()
	for i := 0; ; i++ {
		waitIdle(t, gq, got)
		select {
		case k := <-got:
			gq.Done(k)
			return k, clk.Now()
		case <-time.After(wait):
		}
		if i == len(steps) {
			break
		}
		clk.Step(steps[i])
	}
	gq.ShutDown()
	<-got
	return "", clk.Now()
}

func TestQueueParkedGangWaitsForHelpfulChange(t *testing.T) {
	clk := newFakeClock()
	gq := newQueue(20*time.Millisecond, 40*time.Millisecond, time.Hour, clk)
	gq.Add("pg:ns/a")
	if k := next(t, gq, time.Second); k != "pg:ns/a" {
		t.Fatalf("got %q", k)
	}
	gq.Park("pg:ns/a", gq.Cycle())
	gq.Add("pg:ns/a") // an event about the gang itself: after the backoff
	if k := next(t, gq, time.Second); k != "pg:ns/a" {
		t.Fatalf("own event: got %q", k)
	}
	gq.Park("pg:ns/a", gq.Cycle())
	clk.Step(60 * time.Millisecond) // backoff over, still parked
	gq.FlushParked()
	if k := next(t, gq, time.Second); k != "pg:ns/a" {
		t.Fatalf("after flush: got %q", k)
	}
	gq.Park("pg:ns/a", gq.Cycle())
	if k := next(t, gq, 200*time.Millisecond); k != "" {
		t.Fatalf("parked gang retried without a change: %q", k)
	}
}

func TestQueueChangeDuringAttemptIsNotLost(t *testing.T) {
	gq := newQueue(10*time.Millisecond, 10*time.Millisecond, time.Hour, nil)
	c := gq.Cycle()
	gq.FlushParked() // arrives while the attempt runs
	gq.Park("pg:ns/a", c)
	if k := next(t, gq, time.Second); k != "pg:ns/a" {
		t.Fatalf("park: got %q", k)
	}
	gq2 := newQueue(10*time.Millisecond, 10*time.Millisecond, time.Hour, nil)
	c = gq2.Cycle()
	gq2.WakeWaiting("ns")
	gq2.Wait("pod:ns/p", "ns", c)
	if k := next(t, gq2, time.Second); k != "pod:ns/p" {
		t.Fatalf("wait: got %q", k)
	}
}

func TestQueueBackoffGrowsWithJitter(t *testing.T) {
	gq := newQueue(100*time.Millisecond, time.Second, time.Hour, nil)
	defer gq.ShutDown()
	var got []time.Duration
	for range 6 {
		got = append(got, gq.Park("k", gq.Cycle()))
	}
	bounds := []time.Duration{100, 200, 400, 800, 1000, 1000}
	for i, d := range got {
		lo, hi := bounds[i]*time.Millisecond*8/10, bounds[i]*time.Millisecond*12/10
		if d < lo || d > hi {
			t.Errorf("attempt %d: backoff %v not in [%v, %v]", i+1, d, lo, hi)
		}
	}
	gq.Forget("k")
	if d := gq.Park("k", gq.Cycle()); d > 120*time.Millisecond {
		t.Errorf("after forget: backoff %v, want ~100ms", d)
	}
}

// TestQueueDevicesShortGangWaitsForDevices: a bound pod's end wakes the
// parked gangs, except those parked short of free devices (its devices are
// freed with its claims); any other change that can help wakes them too.
// A later plain park clears the mark.
func TestQueueDevicesShortGangWaitsForDevices(t *testing.T) {
	clk := newFakeClock()
	gq := newQueue(10*time.Millisecond, 10*time.Millisecond, time.Hour, clk)
	gq.ParkDevicesShort("pg:ns/short", gq.Cycle(), 4)
	gq.Park("pg:ns/other", gq.Cycle())
	clk.Step(30 * time.Millisecond) // backoffs over, both parked
	gq.NodeResourcesFreed()
	if k := next(t, gq, time.Second); k != "pg:ns/other" {
		t.Fatalf("after a pod's end: got %q, want the gang not short of devices", k)
	}
	clk2 := newFakeClock()
	gq2 := newQueue(10*time.Millisecond, 10*time.Millisecond, time.Hour, clk2)
	gq2.ParkDevicesShort("pg:ns/short", gq2.Cycle(), 4)
	clk2.Step(30 * time.Millisecond)
	gq2.NodeResourcesFreed()
	if k := next(t, gq2, 200*time.Millisecond); k != "" {
		t.Fatalf("a pod's end woke a gang short of devices: %q", k)
	}
	clk3 := newFakeClock()
	gq3 := newQueue(10*time.Millisecond, 10*time.Millisecond, time.Hour, clk3)
	gq3.ParkDevicesShort("pg:ns/short", gq3.Cycle(), 4)
	clk3.Step(30 * time.Millisecond)
	gq3.FlushParked() // a claim deallocated
	if k := next(t, gq3, time.Second); k != "pg:ns/short" {
		t.Fatalf("after devices freed: got %q", k)
	}
	gq3.Park("pg:ns/short", gq3.Cycle()) // refused again, for another reason
	clk3.Step(30 * time.Millisecond)
	gq3.NodeResourcesFreed()
	if k := next(t, gq3, time.Second); k != "pg:ns/short" {
		t.Fatalf("a plain park kept the devices-short mark: got %q", k)
	}
}

// TestQueuePopsBackoffWhenIdle: a gang woken during its backoff is handed
// out early when nothing else is ready, whether the worker asks after the
// wake or is already waiting (kube-scheduler's SchedulerPopFromBackoffQ);
// a ready gang goes first; a gang that errored waits its backoff out.
func TestQueuePopsBackoffWhenIdle(t *testing.T) {
	const backoff = 10 * time.Second
	gq := newQueue(backoff, backoff, time.Hour, nil)
	gq.Park("pg:ns/a", gq.Cycle())
	gq.FlushParked() // woken, 8-12 s of backoff left
	start := time.Now()
	if k := next(t, gq, time.Second); k != "pg:ns/a" {
		t.Fatalf("worker asking after the wake: got %q, want the woken gang at once", k)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("handed out after %v", d)
	}

	gq2 := newQueue(backoff, backoff, time.Hour, nil)
	gq2.Park("pg:ns/a", gq2.Cycle())
	got := make(chan string, 1)
	go func() { k, _ := gq2.Get(); gq2.Done(k); got <- k }()
	waitIdle(t, gq2, got) // the worker waits in Get
	gq2.FlushParked()
	select {
	case k := <-got:
		if k != "pg:ns/a" {
			t.Fatalf("waiting worker: got %q", k)
		}
	case <-time.After(time.Second):
		t.Fatal("a waiting worker was not handed the woken gang")
	}

	gq3 := newQueue(backoff, backoff, time.Hour, nil)
	gq3.Park("pg:ns/a", gq3.Cycle())
	gq3.FlushParked()
	gq3.Add("pg:ns/ready")
	if k := next(t, gq3, time.Second); k != "pg:ns/ready" {
		t.Fatalf("got %q, want the ready gang before the one backing off", k)
	}
	if k := next(t, gq3, time.Second); k != "pg:ns/a" {
		t.Fatalf("then: got %q, want the woken gang", k)
	}

	gq4 := newQueue(backoff, backoff, time.Hour, nil)
	gq4.ParkError("pg:ns/err", gq4.Cycle())
	gq4.FlushParked()
	if k := next(t, gq4, 300*time.Millisecond); k != "" {
		t.Fatalf("a gang that errored was handed out before its backoff's end: %q", k)
	}
}

// TestQueueBackoffEndsOnTime: a woken gang leaves the backoff queue for
// the active queue when its backoff ends, without the worker's help.
func TestQueueBackoffEndsOnTime(t *testing.T) {
	clk := newFakeClock()
	gq := newQueue(100*time.Millisecond, 100*time.Millisecond, time.Hour, clk)
	gq.ParkError("pg:ns/err", gq.Cycle())
	gq.FlushParked()
	start := clk.Now()
	k, at := nextStepping(t, gq, clk, 200*time.Millisecond, 70*time.Millisecond, 50*time.Millisecond)
	if k != "pg:ns/err" {
		t.Fatalf("got %q after its backoff", k)
	}
	if d := at.Sub(start); d < 70*time.Millisecond {
		t.Fatalf("handed out after %v, before its backoff (80-120 ms) ended", d)
	}
}

// TestQueueDevicesFreedCountsDevices: a gang parked short of devices is
// woken by claims freeing devices only once they freed as many as it
// lacked; other parked gangs are woken by any such claim.
func TestQueueDevicesFreedCountsDevices(t *testing.T) {
	for _, tc := range []struct {
		name  string
		other bool  // a gang not short of devices is parked too
		freed []int // devicesFreed calls
		want  string
	}{
		{name: "3 freed wake the other gang only", other: true, freed: []int{3}, want: "pg:ns/other"},
		{name: "7 freed do not wake a gang lacking 8", freed: []int{3, 4}, want: ""},
		{name: "8 freed wake it", freed: []int{3, 5}, want: "pg:ns/short"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := newFakeClock()
			gq := newQueue(10*time.Millisecond, 10*time.Millisecond, time.Hour, clk)
			gq.ParkDevicesShort("pg:ns/short", gq.Cycle(), 8)
			if tc.other {
				gq.Park("pg:ns/other", gq.Cycle())
			}
			clk.Step(30 * time.Millisecond) // backoffs over, parked
			for _, n := range tc.freed {
				gq.DevicesFreed(n)
			}
			wait := time.Second
			if tc.want == "" {
				wait = 200 * time.Millisecond
			}
			if k := next(t, gq, wait); k != tc.want {
				t.Fatalf("got %q, want %q", k, tc.want)
			}
		})
	}
}

// TestQueueStaleTimersDoNotRetry: a not-ready gang's settle timer and a
// park's MaxUnschedulableWait timer try the gang only while it is still
// in the state that set them: once an event and an attempt moved it on
// (refused and parked again), an old timer costs it no attempt.
func TestQueueStaleTimersDoNotRetry(t *testing.T) {
	t.Run("settle timer of a gang refused since", func(t *testing.T) {
		clk := newFakeClock()
		gq := newQueue(time.Hour, time.Hour, time.Hour, clk)
		gq.Wait("pg:ns/a", "ns", gq.Cycle())
		gq.RetryWhileWaiting("pg:ns/a", 50*time.Millisecond)
		gq.Add("pg:ns/a") // its last member arrived
		if k := next(t, gq, time.Second); k != "pg:ns/a" {
			t.Fatalf("member event: got %q", k)
		}
		gq.Park("pg:ns/a", gq.Cycle())  // refused: backs off for an hour
		clk.Step(50 * time.Millisecond) // the settle timer fires
		if k := next(t, gq, 200*time.Millisecond); k != "" {
			t.Fatalf("the settle timer tried a refused gang: %q", k)
		}
	})
	t.Run("settle timer of a gang still waiting", func(t *testing.T) {
		clk := newFakeClock()
		gq := newQueue(time.Hour, time.Hour, time.Hour, clk)
		gq.Wait("pg:ns/a", "ns", gq.Cycle())
		gq.RetryWhileWaiting("pg:ns/a", 50*time.Millisecond)
		clk.Step(50 * time.Millisecond) // the settle timer fires
		if k := next(t, gq, time.Second); k != "pg:ns/a" {
			t.Fatalf("got %q, want the waiting gang", k)
		}
	})
	t.Run("max wait of an earlier park", func(t *testing.T) {
		clk := newFakeClock()
		gq := newQueue(10*time.Millisecond, 10*time.Millisecond, 150*time.Millisecond, clk)
		gq.Park("pg:ns/a", gq.Cycle())
		clk.Step(80 * time.Millisecond)
		gq.FlushParked()
		if k := next(t, gq, time.Second); k != "pg:ns/a" {
			t.Fatalf("flush: got %q", k)
		}
		parked := clk.Now()
		gq.Park("pg:ns/a", gq.Cycle()) // the first park's timer fires 70 ms from now
		// Past the first park's max wait, then past the second's.
		k, at := nextStepping(t, gq, clk, 200*time.Millisecond, 70*time.Millisecond, 80*time.Millisecond)
		if k != "pg:ns/a" {
			t.Fatalf("the second park's max wait: got %q", k)
		}
		if d := at.Sub(parked); d < 140*time.Millisecond {
			t.Fatalf("tried %v after the second park: the first park's max wait fired", d)
		}
	})
}

// TestQueueTimedOutBacksOffHarder: a timed-out attempt counts
// TimedOutWeight attempts, so its backoff grows 2^TimedOutWeight-fold per
// timed-out attempt up to TimedOutMaxFactor × MaxBackoff (a plain park
// stops at MaxBackoff), and the gang is not handed out before it ends.
func TestQueueTimedOutBacksOffHarder(t *testing.T) {
	gq := newQueue(100*time.Millisecond, time.Second, time.Hour, nil)
	defer gq.ShutDown()
	var got []time.Duration
	for range 4 {
		got = append(got, gq.ParkTimedOut("k", gq.Cycle()))
	}
	// Attempts counted: 3, 6, 9, 12 → 400 ms, 3.2 s, then the 6 s cap.
	bounds := []time.Duration{400, 3200, 6000, 6000}
	for i, d := range got {
		lo, hi := bounds[i]*time.Millisecond*8/10, bounds[i]*time.Millisecond*12/10
		if d < lo || d > hi {
			t.Errorf("timed-out attempt %d: backoff %v not in [%v, %v]", i+1, d, lo, hi)
		}
	}
	plain := newQueue(100*time.Millisecond, time.Second, time.Hour, nil)
	defer plain.ShutDown()
	for range 4 {
		if d := plain.Park("k", plain.Cycle()); d > 1200*time.Millisecond {
			t.Errorf("plain park: backoff %v past MaxBackoff", d)
		}
	}

	const backoff = 10 * time.Second
	gq2 := newQueue(backoff, backoff, time.Hour, nil)
	gq2.ParkTimedOut("pg:ns/slow", gq2.Cycle())
	gq2.FlushParked()
	if k := next(t, gq2, 300*time.Millisecond); k != "" {
		t.Fatalf("a timed-out gang was handed out before its backoff's end: %q", k)
	}
}
