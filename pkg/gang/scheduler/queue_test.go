package scheduler

import (
	"testing"
	"time"
)

// next returns the key the queue hands out within d, or "".
func next(t *testing.T, gq *gangQueue, d time.Duration) string {
	t.Helper()
	got := make(chan string, 1)
	go func() {
		k, _ := gq.get()
		got <- k
	}()
	select {
	case k := <-got:
		gq.done(k)
		return k
	case <-time.After(d):
		gq.shutDown() // unblocks the getter; the queue is not reused
		<-got
		return ""
	}
}

func TestQueueParkedGangWaitsForHelpfulChange(t *testing.T) {
	gq := newGangQueue(20*time.Millisecond, 40*time.Millisecond, time.Hour)
	gq.add("pg:ns/a")
	if k := next(t, gq, time.Second); k != "pg:ns/a" {
		t.Fatalf("got %q", k)
	}
	gq.park("pg:ns/a", gq.cycle())
	gq.add("pg:ns/a") // an event about the gang itself: after the backoff
	if k := next(t, gq, time.Second); k != "pg:ns/a" {
		t.Fatalf("own event: got %q", k)
	}
	gq.park("pg:ns/a", gq.cycle())
	time.Sleep(60 * time.Millisecond) // backoff over, still parked
	gq.flushParked()
	if k := next(t, gq, time.Second); k != "pg:ns/a" {
		t.Fatalf("after flush: got %q", k)
	}
	gq.park("pg:ns/a", gq.cycle())
	if k := next(t, gq, 200*time.Millisecond); k != "" {
		t.Fatalf("parked gang retried without a change: %q", k)
	}
}

func TestQueueChangeDuringAttemptIsNotLost(t *testing.T) {
	gq := newGangQueue(10*time.Millisecond, 10*time.Millisecond, time.Hour)
	c := gq.cycle()
	gq.flushParked() // arrives while the attempt runs
	gq.park("pg:ns/a", c)
	if k := next(t, gq, time.Second); k != "pg:ns/a" {
		t.Fatalf("park: got %q", k)
	}
	gq2 := newGangQueue(10*time.Millisecond, 10*time.Millisecond, time.Hour)
	c = gq2.cycle()
	gq2.wakeWaiting("ns")
	gq2.wait("pod:ns/p", "ns", c)
	if k := next(t, gq2, time.Second); k != "pod:ns/p" {
		t.Fatalf("wait: got %q", k)
	}
}

func TestQueueBackoffGrowsWithJitter(t *testing.T) {
	gq := newGangQueue(100*time.Millisecond, time.Second, time.Hour)
	defer gq.shutDown()
	var got []time.Duration
	for range 6 {
		got = append(got, gq.park("k", gq.cycle()))
	}
	bounds := []time.Duration{100, 200, 400, 800, 1000, 1000}
	for i, d := range got {
		lo, hi := bounds[i]*time.Millisecond*8/10, bounds[i]*time.Millisecond*12/10
		if d < lo || d > hi {
			t.Errorf("attempt %d: backoff %v not in [%v, %v]", i+1, d, lo, hi)
		}
	}
	gq.forget("k")
	if d := gq.park("k", gq.cycle()); d > 120*time.Millisecond {
		t.Errorf("after forget: backoff %v, want ~100ms", d)
	}
}

func TestSplitKey(t *testing.T) {
	for _, tc := range []struct {
		key      string
		group    bool
		ns, name string
	}{{podGroupKey("a", "b"), true, "a", "b"}, {"pod:x/y", false, "x", "y"}} {
		g, ns, name := splitKey(tc.key)
		if g != tc.group || ns != tc.ns || name != tc.name {
			t.Errorf("splitKey(%q) = %v %q %q", tc.key, g, ns, name)
		}
	}
}

// TestQueueDevicesShortGangWaitsForDevices: a bound pod's end wakes the
// parked gangs, except those parked short of free devices (its devices are
// freed with its claims); any other change that can help wakes them too.
// A later plain park clears the mark.
func TestQueueDevicesShortGangWaitsForDevices(t *testing.T) {
	gq := newGangQueue(10*time.Millisecond, 10*time.Millisecond, time.Hour)
	gq.parkDevicesShort("pg:ns/short", gq.cycle())
	gq.park("pg:ns/other", gq.cycle())
	time.Sleep(30 * time.Millisecond) // backoffs over, both parked
	gq.nodeResourcesFreed()
	if k := next(t, gq, time.Second); k != "pg:ns/other" {
		t.Fatalf("after a pod's end: got %q, want the gang not short of devices", k)
	}
	gq2 := newGangQueue(10*time.Millisecond, 10*time.Millisecond, time.Hour)
	gq2.parkDevicesShort("pg:ns/short", gq2.cycle())
	time.Sleep(30 * time.Millisecond)
	gq2.nodeResourcesFreed()
	if k := next(t, gq2, 200*time.Millisecond); k != "" {
		t.Fatalf("a pod's end woke a gang short of devices: %q", k)
	}
	gq3 := newGangQueue(10*time.Millisecond, 10*time.Millisecond, time.Hour)
	gq3.parkDevicesShort("pg:ns/short", gq3.cycle())
	time.Sleep(30 * time.Millisecond)
	gq3.flushParked() // a claim deallocated
	if k := next(t, gq3, time.Second); k != "pg:ns/short" {
		t.Fatalf("after devices freed: got %q", k)
	}
	gq3.park("pg:ns/short", gq3.cycle()) // refused again, for another reason
	time.Sleep(30 * time.Millisecond)
	gq3.nodeResourcesFreed()
	if k := next(t, gq3, time.Second); k != "pg:ns/short" {
		t.Fatalf("a plain park kept the devices-short mark: got %q", k)
	}
}
