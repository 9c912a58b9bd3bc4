package report

import (
	"testing"
	"time"
)

const interval = time.Second

// TestThrottleDue: a gang writes its not-ready status at most once
// per interval, is told how long to wait, and may write at once after it
// was forgotten; gangs do not share their times.
func TestThrottleDue(t *testing.T) {
	w := Throttle{Interval: interval}
	t0 := time.Unix(1000, 0)
	for _, tc := range []struct {
		key       string
		at        time.Duration
		forget    bool
		wantOK    bool
		wantAfter time.Duration
	}{
		{key: "pg:ns/a", at: 0, wantOK: true},
		{key: "pg:ns/a", at: 300 * time.Millisecond, wantAfter: 700 * time.Millisecond},
		{key: "pg:ns/b", at: 300 * time.Millisecond, wantOK: true},
		{key: "pg:ns/a", at: interval, wantOK: true},
		{key: "pg:ns/a", at: interval + time.Millisecond, wantAfter: interval - time.Millisecond},
		{key: "pg:ns/a", at: interval + 2*time.Millisecond, forget: true, wantOK: true},
	} {
		if tc.forget {
			w.Forget(tc.key)
		}
		ok, after := w.Due(tc.key, t0.Add(tc.at))
		if ok != tc.wantOK || after != tc.wantAfter {
			t.Errorf("%s at %v: due = %v, %v; want %v, %v", tc.key, tc.at, ok, after, tc.wantOK, tc.wantAfter)
		}
	}
}
