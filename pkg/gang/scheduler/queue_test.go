package scheduler

import (
	"testing"
	"time"

	"github.com/gpufabric/gpufabric/pkg/gang/placement"
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
	gq.parkDevicesShort("pg:ns/short", gq.cycle(), 4)
	gq.park("pg:ns/other", gq.cycle())
	time.Sleep(30 * time.Millisecond) // backoffs over, both parked
	gq.nodeResourcesFreed()
	if k := next(t, gq, time.Second); k != "pg:ns/other" {
		t.Fatalf("after a pod's end: got %q, want the gang not short of devices", k)
	}
	gq2 := newGangQueue(10*time.Millisecond, 10*time.Millisecond, time.Hour)
	gq2.parkDevicesShort("pg:ns/short", gq2.cycle(), 4)
	time.Sleep(30 * time.Millisecond)
	gq2.nodeResourcesFreed()
	if k := next(t, gq2, 200*time.Millisecond); k != "" {
		t.Fatalf("a pod's end woke a gang short of devices: %q", k)
	}
	gq3 := newGangQueue(10*time.Millisecond, 10*time.Millisecond, time.Hour)
	gq3.parkDevicesShort("pg:ns/short", gq3.cycle(), 4)
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

// TestQueuePopsBackoffWhenIdle: a gang woken during its backoff is handed
// out early when nothing else is ready, whether the worker asks after the
// wake or is already waiting (kube-scheduler's SchedulerPopFromBackoffQ);
// a ready gang goes first; a gang that errored waits its backoff out.
func TestQueuePopsBackoffWhenIdle(t *testing.T) {
	const backoff = 10 * time.Second
	gq := newGangQueue(backoff, backoff, time.Hour)
	gq.park("pg:ns/a", gq.cycle())
	gq.flushParked() // woken, 8-12 s of backoff left
	start := time.Now()
	if k := next(t, gq, time.Second); k != "pg:ns/a" {
		t.Fatalf("worker asking after the wake: got %q, want the woken gang at once", k)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("handed out after %v", d)
	}

	gq2 := newGangQueue(backoff, backoff, time.Hour)
	gq2.park("pg:ns/a", gq2.cycle())
	got := make(chan string, 1)
	go func() { k, _ := gq2.get(); gq2.done(k); got <- k }()
	time.Sleep(50 * time.Millisecond) // the worker waits in get
	gq2.flushParked()
	select {
	case k := <-got:
		if k != "pg:ns/a" {
			t.Fatalf("waiting worker: got %q", k)
		}
	case <-time.After(time.Second):
		t.Fatal("a waiting worker was not handed the woken gang")
	}

	gq3 := newGangQueue(backoff, backoff, time.Hour)
	gq3.park("pg:ns/a", gq3.cycle())
	gq3.flushParked()
	gq3.add("pg:ns/ready")
	if k := next(t, gq3, time.Second); k != "pg:ns/ready" {
		t.Fatalf("got %q, want the ready gang before the one backing off", k)
	}
	if k := next(t, gq3, time.Second); k != "pg:ns/a" {
		t.Fatalf("then: got %q, want the woken gang", k)
	}

	gq4 := newGangQueue(backoff, backoff, time.Hour)
	gq4.parkError("pg:ns/err", gq4.cycle())
	gq4.flushParked()
	if k := next(t, gq4, 300*time.Millisecond); k != "" {
		t.Fatalf("a gang that errored was handed out before its backoff's end: %q", k)
	}
}

// TestQueueBackoffEndsOnTime: a woken gang leaves the backoff queue for
// the active queue when its backoff ends, without the worker's help.
func TestQueueBackoffEndsOnTime(t *testing.T) {
	gq := newGangQueue(100*time.Millisecond, 100*time.Millisecond, time.Hour)
	gq.parkError("pg:ns/err", gq.cycle())
	gq.flushParked()
	start := time.Now()
	if k := next(t, gq, 2*time.Second); k != "pg:ns/err" {
		t.Fatalf("got %q after its backoff", k)
	}
	if d := time.Since(start); d < 70*time.Millisecond {
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
			gq := newGangQueue(10*time.Millisecond, 10*time.Millisecond, time.Hour)
			gq.parkDevicesShort("pg:ns/short", gq.cycle(), 8)
			if tc.other {
				gq.park("pg:ns/other", gq.cycle())
			}
			time.Sleep(30 * time.Millisecond) // backoffs over, parked
			for _, n := range tc.freed {
				gq.devicesFreed(n)
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

func TestDevicesShort(t *testing.T) {
	gang := func(members, minCount int) *placement.Gang {
		return &placement.Gang{Members: make([]placement.Member, members), MinCount: minCount}
	}
	level := func(free int) placement.LevelReport {
		return placement.LevelReport{Best: &placement.DomainReport{FreeDevices: free}}
	}
	for _, tc := range []struct {
		name string
		g    *placement.Gang
		u    *placement.Unschedulable
		want int
	}{
		{"short everywhere: lacks the difference in the best domain", gang(4, 4), &placement.Unschedulable{Devices: 32, Levels: []placement.LevelReport{level(8), level(20), level(24)}}, 8},
		{"a domain has the devices: something else refused it", gang(4, 4), &placement.Unschedulable{Devices: 32, Levels: []placement.LevelReport{level(8), level(40)}}, 0},
		{"minCount below the size: a part may fit", gang(4, 2), &placement.Unschedulable{Devices: 32, Levels: []placement.LevelReport{level(8)}}, 0},
		{"no device count", gang(4, 4), &placement.Unschedulable{Levels: []placement.LevelReport{level(0)}}, 0},
		{"no level tried", gang(4, 4), &placement.Unschedulable{Devices: 32}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := devicesShort(tc.g, tc.u); got != tc.want {
				t.Errorf("devicesShort = %d, want %d", got, tc.want)
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
		gq := newGangQueue(time.Hour, time.Hour, time.Hour)
		gq.wait("pg:ns/a", "ns", gq.cycle())
		gq.retryWhileWaiting("pg:ns/a", 50*time.Millisecond)
		gq.add("pg:ns/a") // its last member arrived
		if k := next(t, gq, time.Second); k != "pg:ns/a" {
			t.Fatalf("member event: got %q", k)
		}
		gq.park("pg:ns/a", gq.cycle()) // refused: backs off for an hour
		if k := next(t, gq, 200*time.Millisecond); k != "" {
			t.Fatalf("the settle timer tried a refused gang: %q", k)
		}
	})
	t.Run("settle timer of a gang still waiting", func(t *testing.T) {
		gq := newGangQueue(time.Hour, time.Hour, time.Hour)
		gq.wait("pg:ns/a", "ns", gq.cycle())
		gq.retryWhileWaiting("pg:ns/a", 50*time.Millisecond)
		if k := next(t, gq, time.Second); k != "pg:ns/a" {
			t.Fatalf("got %q, want the waiting gang", k)
		}
	})
	t.Run("max wait of an earlier park", func(t *testing.T) {
		gq := newGangQueue(10*time.Millisecond, 10*time.Millisecond, 150*time.Millisecond)
		gq.park("pg:ns/a", gq.cycle())
		time.Sleep(80 * time.Millisecond)
		gq.flushParked()
		if k := next(t, gq, time.Second); k != "pg:ns/a" {
			t.Fatalf("flush: got %q", k)
		}
		parked := time.Now()
		gq.park("pg:ns/a", gq.cycle()) // the first park's timer fires ~70 ms from now
		if k := next(t, gq, time.Second); k != "pg:ns/a" {
			t.Fatalf("the second park's max wait: got %q", k)
		}
		if d := time.Since(parked); d < 140*time.Millisecond {
			t.Fatalf("tried %v after the second park: the first park's max wait fired", d)
		}
	})
}
