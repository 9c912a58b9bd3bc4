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
