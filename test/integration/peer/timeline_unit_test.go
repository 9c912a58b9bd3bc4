package peer

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"k8s.io/klog/v2/textlogger"
)

// TestGangTimeline: the timeline is read back from klog's text format as
// the scheduler writes it (durations and the commit's phases as quoted
// strings), only for the named gang.
func TestGangTimeline(t *testing.T) {
	var buf bytes.Buffer
	logger := textlogger.NewLogger(textlogger.NewConfig(textlogger.Output(&buf), textlogger.Verbosity(3))).WithName("gpufabric-scheduler")
	gang := logger.WithValues("gang", "pg:ns/g0000")
	gang.Info("Gang not ready", "reason", `gang "ns/g0000": have 3 of 4 pods`)
	logger.WithValues("gang", "pg:ns/g0001").Info("Gang not ready", "reason", "other gang")
	gang.Info("Wrote waiting status", "members", 3, "duration", 250*time.Millisecond)
	gang.Info("Gang not ready", "reason", "have 3 of 4 pods")
	gang.Info("Waiting status cut short: the gang's members arrived", "members", 3, "duration", 50*time.Millisecond)
	gang.Info("Placed gang", "domain", "spine", "key", "", "pods", 4, "claims", 4, "duration", 20*time.Millisecond, "attempt", 30*time.Millisecond)
	gang.Info("Committed gang", "pods", 4, "claimWrites", 4, "phases", fakePhases("record=10ms pod_claims=1.5s bind=800ms condition=5ms clear_record=4ms"))

	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	year := time.Now().Year()
	var parsed []logLine
	for _, l := range lines {
		if !strings.Contains(l, `gang="pg:ns/g0000"`) {
			continue
		}
		p, ok := parseLogLine(l, year)
		if !ok {
			t.Fatalf("not parsed: %s", l)
		}
		parsed = append(parsed, p)
	}
	if len(parsed) != 6 {
		t.Fatalf("%d lines of the gang, want 6:\n%s", len(parsed), buf.String())
	}
	if d := time.Since(parsed[0].at); d < 0 || d > time.Minute {
		t.Errorf("first line at %v, %v ago", parsed[0].at, d)
	}
	tl := timelineOf(parsed, parsed[1].at)
	if tl.notReady != 2 || tl.notReadyLate != 1 || tl.waitingWrites != 2 || tl.cut != 1 || tl.waitingWriteTime != 300*time.Millisecond {
		t.Errorf("timeline %+v", tl)
	}
	if got := tl.placed.Sub(tl.readyStart); got != 30*time.Millisecond {
		t.Errorf("ready attempt %v before placed, want 30ms", got)
	}
	if got, want := tl.bindStart.Sub(tl.placed), 1510*time.Millisecond; got != want {
		t.Errorf("bind phase %v after placed, want %v", got, want)
	}
	if got := tl.bindEnd.Sub(tl.bindStart); got != 800*time.Millisecond {
		t.Errorf("bind phase %v, want 800ms", got)
	}
}

type fakePhases string

func (f fakePhases) String() string { return string(f) }
