package report

import (
	"strings"
	"testing"
	"unicode/utf8"

	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/events"
)

func TestTruncate(t *testing.T) {
	for _, tc := range []struct {
		in   string
		n    int
		want string
	}{
		{"short", 10, "short"},
		{"exactly10!", 10, "exactly10!"},
		{"0123456789abc", 10, "0123456..."},
		{"ab€€€€", 8, "ab€..."},
		{"ab€€€€", 7, "ab..."}, // € is 3 bytes: never cut inside it
	} {
		if got := Truncate(tc.in, tc.n); got != tc.want {
			t.Errorf("Truncate(%q, %d) = %q, want %q", tc.in, tc.n, got, tc.want)
		}
	}
}

func TestEventNoteBounded(t *testing.T) {
	rec := events.NewFakeRecorder(1)
	r := New(rec)
	r.Event(&v1.Pod{}, v1.EventTypeWarning, "FailedScheduling", "Scheduling", strings.Repeat("é", 4096))
	got := <-rec.Events
	// The fake recorder writes "type reason note".
	note := strings.TrimPrefix(got, "Warning FailedScheduling ")
	if len(note) > MaxNote || !utf8.ValidString(note) || !strings.HasSuffix(note, "...") {
		t.Errorf("note of %d bytes (valid UTF-8 %v), want at most %d ending in ...", len(note), utf8.ValidString(note), MaxNote)
	}
	var nilReporter *Reporter
	nilReporter.Event(&v1.Pod{}, v1.EventTypeNormal, "X", "Y", "z") // records nothing, does not panic
}

func TestQuoteAndMessage(t *testing.T) {
	long := strings.Repeat("x", 256<<10)
	if got := Quote(long, MaxQuoted); len(got) > MaxQuoted+2 || !strings.HasSuffix(got, `..."`) {
		t.Errorf("Quote of 256 KiB: %d bytes, want at most %d ending in ...", len(got), MaxQuoted+2)
	}
	if got := Quote("a\"b", 10); got != `"a\"b"` {
		t.Errorf("Quote = %s", got)
	}
	if got := Message(long); len(got) != MaxMessage {
		t.Errorf("Message of 256 KiB: %d bytes, want %d", len(got), MaxMessage)
	}
}
