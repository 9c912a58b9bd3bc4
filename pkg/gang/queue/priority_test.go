package queue

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestQueueServesByPriorityThenAge(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ranks := map[string]Rank{
		"pg:ns/old-low":  {Priority: 0, Since: t0},
		"pg:ns/new-low":  {Priority: 0, Since: t0.Add(time.Minute)},
		"pg:ns/new-high": {Priority: 1000, Since: t0.Add(2 * time.Minute)},
		"pg:ns/old-high": {Priority: 1000, Since: t0.Add(-time.Minute)},
		"pod:ns/neg":     {Priority: -5, Since: t0.Add(-time.Hour)},
		"pg:ns/tie-b":    {Priority: 10, Since: t0},
		"pg:ns/tie-a":    {Priority: 10, Since: t0},
	}
	gq := newQueue(time.Millisecond, time.Millisecond, time.Hour, nil)
	gq.SetRank(func(k string) Rank { return ranks[k] })
	for _, k := range []string{"pg:ns/old-low", "pod:ns/neg", "pg:ns/new-high", "pg:ns/tie-b", "pg:ns/new-low", "pg:ns/old-high", "pg:ns/tie-a"} {
		gq.Add(k)
	}
	var got []string
	for range ranks {
		got = append(got, next(t, gq, time.Second))
	}
	want := []string{"pg:ns/old-high", "pg:ns/new-high", "pg:ns/tie-a", "pg:ns/tie-b", "pg:ns/old-low", "pg:ns/new-low", "pod:ns/neg"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("order (-want +got):\n%s", diff)
	}
}

func TestQueueReorderAfterRanksChange(t *testing.T) {
	ranks := map[string]Rank{"pg:ns/a": {Priority: 1}, "pg:ns/b": {Priority: 2}}
	gq := newQueue(time.Millisecond, time.Millisecond, time.Hour, nil)
	gq.SetRank(func(k string) Rank { return ranks[k] })
	gq.Add("pg:ns/a")
	gq.Add("pg:ns/b")
	// What the informers showed when the keys were queued was incomplete.
	ranks["pg:ns/a"] = Rank{Priority: 3}
	gq.Reorder()
	if k := next(t, gq, time.Second); k != "pg:ns/a" {
		t.Fatalf("after reorder: got %q, want pg:ns/a", k)
	}
	// Touch (an event for a queued key) re-reads one key's rank.
	gq.Add("pg:ns/c")
	ranks["pg:ns/c"] = Rank{Priority: 5}
	gq.Add("pg:ns/c")
	if k := next(t, gq, time.Second); k != "pg:ns/c" {
		t.Fatalf("after touch: got %q, want pg:ns/c", k)
	}
}

// TestQueueFairShareAcrossNamespaces: between namespaces with gangs of the
// same priority, the one whose attempts used the least worker time goes
// first, whatever the gangs' ages; priority still comes first; a namespace
// with nothing queued banks no credit (it comes back at the time of the
// last one served); within a namespace the order is the rank's.
func TestQueueFairShareAcrossNamespaces(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ranks := map[string]Rank{
		"pg:dear/a":  {Since: t0},
		"pg:dear/b":  {Since: t0.Add(time.Second)},
		"pg:cheap/x": {Since: t0.Add(time.Hour)},
		"pg:cheap/y": {Since: t0.Add(2 * time.Hour)},
		"pg:vip/z":   {Priority: 100, Since: t0.Add(3 * time.Hour)},
	}
	gq := newQueue(time.Millisecond, time.Millisecond, time.Hour, nil)
	gq.SetRank(func(k string) Rank { return ranks[k] })
	for _, k := range []string{"pg:dear/a", "pg:dear/b", "pg:cheap/x", "pg:cheap/y"} {
		gq.Add(k)
	}
	var got []string
	serve := func(cost time.Duration) {
		k := next(t, gq, time.Second)
		got = append(got, k)
		gq.Charge(k, cost)
	}
	serve(10 * time.Second)      // dear/a: the oldest, nothing charged yet
	serve(10 * time.Millisecond) // cheap/x: dear used more
	gq.Add("pg:vip/z")           // a higher priority goes first regardless
	serve(time.Minute)           // vip/z
	serve(10 * time.Millisecond) // cheap/y
	serve(time.Millisecond)      // dear/b: the only one left
	want := []string{"pg:dear/a", "pg:cheap/x", "pg:vip/z", "pg:cheap/y", "pg:dear/b"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("order (-want +got):\n%s", diff)
	}

	// cheap was idle while dear ran for 10 s: it does not get 10 s of
	// credit, it starts level with dear's last turn.
	gq2 := newQueue(time.Millisecond, time.Millisecond, time.Hour, nil)
	gq2.SetRank(func(k string) Rank { return ranks[k] })
	gq2.Add("pg:dear/a")
	k := next(t, gq2, time.Second)
	gq2.Charge(k, 10*time.Second)
	gq2.Add("pg:dear/b")
	k = next(t, gq2, time.Second)
	gq2.Charge(k, time.Second) // dear at 11 s, the last served started at 10 s
	gq2.Add("pg:cheap/x")
	gq2.Add("pg:dear/a")
	gq2.Charge("pg:cheap/x", 2*time.Second) // cheap from 10 s to 12 s: past dear's 11 s
	if k := next(t, gq2, time.Second); k != "pg:dear/a" {
		t.Errorf("got %q: an idle namespace banked credit", k)
	}
}
