package main

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/gpufabric/gpufabric/pkg/claims/node"
	"github.com/gpufabric/gpufabric/pkg/gang/report"
)

// TestRecordEventBounded: a driver event's message (it may quote what a
// claim holds) is cut to an event's note limit on the Node's event.
func TestRecordEventBounded(t *testing.T) {
	client := fake.NewClientset()
	p := &plugin{opts: &runOptions{discoverOptions: discoverOptions{node: "node-a"}}, client: client}
	p.recordEvent(t.Context(), node.Event{Type: corev1.EventTypeWarning, Reason: "PrepareFailed", Message: strings.Repeat("x", 256<<10)})
	evs, err := client.CoreV1().Events(metav1.NamespaceDefault).List(t.Context(), metav1.ListOptions{})
	if err != nil || len(evs.Items) != 1 {
		t.Fatalf("events %v: %v", evs, err)
	}
	if n := len(evs.Items[0].Message); n > report.MaxNote {
		t.Errorf("message of %d bytes, want at most %d", n, report.MaxNote)
	}
}
