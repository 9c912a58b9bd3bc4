package scheduler

import (
	"fmt"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/client-go/tools/cache"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/gpufabric/gpufabric/pkg/gang/assume"
	"github.com/gpufabric/gpufabric/pkg/gang/commit"
	"github.com/gpufabric/gpufabric/pkg/gang/internal/objtest"
	"github.com/gpufabric/gpufabric/pkg/gang/queue"
)

// countingQueue is a real queue that counts the wake-ups of parked gangs
// and the retries it is asked for.
type countingQueue struct {
	*queue.Queue
	flushes, freed, devices, retries, conflicts int
}

func (q *countingQueue) FlushParked() { q.flushes++; q.Queue.FlushParked() }
func (q *countingQueue) DevicesFreed(n int) {
	q.freed++
	q.devices += n
	q.Queue.DevicesFreed(n)
}
func (q *countingQueue) RetryAfter(key string, d time.Duration) {
	q.retries++
	q.Queue.RetryAfter(key, d)
}
func (q *countingQueue) RetryConflict(key string) time.Duration {
	q.conflicts++
	return q.Queue.RetryConflict(key)
}

func newCountingQueue() *countingQueue {
	clk := testingclock.NewFakeClock(time.Unix(1000, 0))
	return &countingQueue{Queue: queue.New(queue.Config{InitialBackoff: time.Second, MaxBackoff: 10 * time.Second, MaxUnschedulableWait: time.Hour, Clock: clk})}
}

// allocated returns claim name allocated n devices (with admin access
// when admin is set).
func allocated(name string, n int, admin bool) *resourceapi.ResourceClaim {
	c := objtest.Claim(name, true)
	for i := range n {
		r := resourceapi.DeviceRequestAllocationResult{Request: "gpu", Driver: "gpufabric.dev", Pool: "n1", Device: fmt.Sprintf("gpu-%d", i)}
		if admin {
			r.AdminAccess = ptr.To(true)
		}
		c.Status.Allocation.Devices.Results = append(c.Status.Allocation.Devices.Results, r)
	}
	return c
}

// TestClaimDeletionWakesOnlyForFreedDevices: only the deletion or
// deallocation of a claim that held devices wakes parked gangs, and it
// counts those devices; a tenant creating and deleting unallocated claims
// (or claims with admin access only) wakes none. Before, every deletion of
// an unallocated claim woke every parked gang of the cluster.
func TestClaimDeletionWakesOnlyForFreedDevices(t *testing.T) {
	for _, tc := range []struct {
		name          string
		event         func(q queue.Events)
		wakes, device int
	}{
		{"unallocated claim deleted", func(q queue.Events) { claimDeleted(q, objtest.Claim("c", false)) }, 0, 0},
		{"unallocated claim deleted, tombstone", func(q queue.Events) {
			claimDeleted(q, cache.DeletedFinalStateUnknown{Key: "ns/c", Obj: objtest.Claim("c", false)})
		}, 0, 0},
		{"claim with admin access only deleted", func(q queue.Events) { claimDeleted(q, allocated("c", 2, true)) }, 0, 0},
		{"allocated claim deleted", func(q queue.Events) { claimDeleted(q, allocated("c", 4, false)) }, 1, 4},
		{"allocated claim deleted, tombstone", func(q queue.Events) {
			claimDeleted(q, cache.DeletedFinalStateUnknown{Key: "ns/c", Obj: allocated("c", 2, false)})
		}, 1, 2},
		{"claim deallocated", func(q queue.Events) { claimChanged(q, allocated("c", 4, false), objtest.Claim("c", false)) }, 1, 4},
		{"claim with admin access only deallocated", func(q queue.Events) {
			claimChanged(q, allocated("c", 4, true), objtest.Claim("c", false))
		}, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := newCountingQueue()
			defer q.ShutDown()
			q.Park("pg:other/parked", q.Cycle())
			cycle := q.Cycle()
			tc.event(q)
			if got := q.flushes + q.freed; got != tc.wakes || q.devices != tc.device {
				t.Errorf("wake-ups %d (flushes %d, devices freed %d calls, %d devices), want %d wake-ups of %d devices",
					got, q.flushes, q.freed, q.devices, tc.wakes, tc.device)
			}
			if moved := q.Cycle() != cycle; moved != (tc.wakes > 0) {
				t.Errorf("queue moved: %v, want %v", moved, tc.wakes > 0)
			}
		})
	}
}

// TestCommitConflictWakesNoGang: a commit that lost a race is retried with
// the queue's conflict backoff and wakes no parked gang. Before, each
// conflict flushed every parked gang of the cluster and retried the gang
// after 50-150 ms however often it had conflicted.
func TestCommitConflictWakesNoGang(t *testing.T) {
	q := newCountingQueue()
	defer q.ShutDown()
	s := &Scheduler{queue: q, assumed: assume.New()}
	q.Park("pg:other/parked", q.Cycle())
	for range 3 {
		a := &attempt{key: "pg:ns/a"}
		s.assumed.AddInFlight(a.key)
		if err := s.afterCommit(t.Context(), a, nil, nil, nil, fmt.Errorf("write claim: %w", commit.ErrConflict)); err != nil {
			t.Fatalf("afterCommit: %v", err)
		}
		if a.result != resultConflict {
			t.Errorf("result %q, want %q", a.result, resultConflict)
		}
	}
	if q.flushes != 0 || q.retries != 0 || q.conflicts != 3 {
		t.Errorf("flushes %d, plain retries %d, conflict retries %d; want 0, 0, 3", q.flushes, q.retries, q.conflicts)
	}
	if s.assumed.Len() != 0 {
		t.Errorf("the conflicting decision is still assumed")
	}
}
