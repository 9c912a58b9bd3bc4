package scheduler

import (
	"strings"
	"testing"
	"time"

	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestNotReadyWriteTimes: a gang writes its not-ready status at most once
// per interval, is told how long to wait, and may write at once after it
// was forgotten; gangs do not share their times.
func TestNotReadyWriteTimes(t *testing.T) {
	var w writeTimes
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
		{key: "pg:ns/a", at: notReadyWriteInterval, wantOK: true},
		{key: "pg:ns/a", at: notReadyWriteInterval + time.Millisecond, wantAfter: notReadyWriteInterval - time.Millisecond},
		{key: "pg:ns/a", at: notReadyWriteInterval + 2*time.Millisecond, forget: true, wantOK: true},
	} {
		if tc.forget {
			w.forget(tc.key)
		}
		ok, after := w.due(tc.key, t0.Add(tc.at))
		if ok != tc.wantOK || after != tc.wantAfter {
			t.Errorf("%s at %v: due = %v, %v; want %v, %v", tc.key, tc.at, ok, after, tc.wantOK, tc.wantAfter)
		}
	}
}

// TestWaitingPodMessage: a waiting member's message does not depend on how
// many members exist, so a member is written once while its gang waits.
func TestWaitingPodMessage(t *testing.T) {
	pg := &schedulingv1beta1.PodGroup{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "g"}}
	msg := waitingPodMessage(pg)
	if !strings.Contains(msg, "PodGroup ns/g") || strings.ContainsAny(msg, "0123456789") {
		t.Errorf("message %q: want the PodGroup named and no counts", msg)
	}
}
