// Package report records gpufabric-scheduler's events. Every room of the
// scheduler (the loop, commit, evict, guard) reports through one Reporter,
// so every event is bounded the same way.
//
// Rules:
//   - A note is cut to the API's limit (1,024 bytes, valid UTF-8 kept) before
//     it is recorded; nothing a tenant wrote can make an event larger.
//   - Every condition and pod-status message the scheduler writes is cut to
//     MaxMessage (Message) where it is written: a message is copied into
//     every waiting member's status, so its size is paid once per pod.
//   - A value a tenant wrote (an annotation, a label, a name) is quoted in
//     a message cut to MaxQuoted (Quote) where the message is formatted.
//   - A message never names another namespace's objects; it says "of
//     another namespace" and counts them instead.
//   - Reporting never blocks on the API: the events broadcaster sends
//     asynchronously and drops what it cannot send.
//   - A nil *Reporter records nothing (tests of a room without events).
package report

import (
	"strconv"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
)

// MaxNote is the API's limit for an event's note.
const MaxNote = 1024

// MaxMessage bounds every PodGroup condition and pod-status message the
// scheduler writes (the API allows 32 KiB in a condition and does not
// bound a pod condition's message).
const MaxMessage = 4096

// MaxQuoted bounds a tenant's value quoted in a message.
const MaxQuoted = 128

// Reporter records events about PodGroups, pods and claims.
type Reporter struct {
	recorder events.EventRecorder
}

// New returns a Reporter that records through recorder.
func New(recorder events.EventRecorder) *Reporter { return &Reporter{recorder: recorder} }

// Event records an event about obj with reason, action and note (cut to
// MaxNote).
func (r *Reporter) Event(obj runtime.Object, eventType, reason, action, note string) {
	if r == nil || r.recorder == nil {
		return
	}
	r.recorder.Eventf(obj, nil, eventType, reason, action, "%s", Truncate(note, MaxNote))
}

// Truncate cuts s to at most n bytes, ending in "..." when cut, without
// splitting a UTF-8 sequence.
func Truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := max(n-3, 0)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "..."
}

// Message is a condition or pod-status message cut to MaxMessage.
func Message(s string) string { return Truncate(s, MaxMessage) }

// Quote quotes s (as %q does) after cutting it to n bytes.
func Quote(s string, n int) string { return strconv.Quote(Truncate(s, n)) }
