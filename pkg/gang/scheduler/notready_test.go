package scheduler

import (
	"strings"
	"testing"

	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestWaitingPodMessage: a waiting member's message does not depend on how
// many members exist, so a member is written once while its gang waits.
func TestWaitingPodMessage(t *testing.T) {
	pg := &schedulingv1beta1.PodGroup{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "g"}}
	msg := waitingPodMessage(pg)
	if !strings.Contains(msg, "PodGroup ns/g") || strings.ContainsAny(msg, "0123456789") {
		t.Errorf("message %q: want the PodGroup named and no counts", msg)
	}
}
