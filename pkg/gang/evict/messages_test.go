package evict

import (
	"errors"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/events"

	"github.com/gpufabric/gpufabric/pkg/gang/gate"
	"github.com/gpufabric/gpufabric/pkg/gang/preemption"
	"github.com/gpufabric/gpufabric/pkg/gang/report"
	"github.com/gpufabric/gpufabric/pkg/topology"
)

// TestMessagesNameNoOtherNamespace: what a preemption tells tenant-a (the
// Preempting summary, a refused eviction) never names tenant-b or its
// objects, and what it tells tenant-b (the Preempted event and the
// victim's DisruptionTarget condition) never names tenant-a or its gang;
// victims and preemptors of the same namespace are named.
func TestMessagesNameNoOtherNamespace(t *testing.T) {
	secretsOf := map[string][]string{"tenant-a": {"tenant-a", "prod"}, "tenant-b": {"tenant-b", "secret-train", "secret-0"}}
	leaks := func(t *testing.T, readBy, msg string) {
		t.Helper()
		for ns, secrets := range secretsOf {
			if ns == readBy {
				continue
			}
			for _, s := range secrets {
				if strings.Contains(msg, s) {
					t.Errorf("message for %s names %q of %s: %s", readBy, s, ns, msg)
				}
			}
		}
	}
	a := &Attempt{Key: "pg:tenant-a/prod", PodGroup: &schedulingv1beta1.PodGroup{ObjectMeta: metav1.ObjectMeta{Namespace: "tenant-a", Name: "prod"}}, Priority: 1000}
	plan := &preemption.Plan{Domain: "dom-a", Victims: []*preemption.Unit{{Key: "pg:tenant-b/secret-train"}, {Key: "pod:tenant-a/mine"}}}
	summary := preemptionSummary("tenant-a", "gang", plan)
	leaks(t, "tenant-a", summary)
	if !strings.Contains(summary, "tenant-a/mine") || !strings.Contains(summary, "1 of other namespaces") {
		t.Errorf("summary %q: want its own victim named and the other counted", summary)
	}

	client := fake.NewClientset()
	refuse := false
	client.PrependReactor("create", "pods", func(act k8stesting.Action) (bool, runtime.Object, error) {
		if act.GetSubresource() != "eviction" {
			return false, nil, nil
		}
		if refuse {
			return true, nil, apierrors.NewTooManyRequests("Cannot evict pod as it would violate the pod's disruption budget of "+act.GetNamespace(), 0)
		}
		return true, nil, nil
	})
	rec := events.NewFakeRecorder(10)
	e := New(Config{Client: client, Gate: &gate.Gate{}, Report: report.New(rec)})
	nm := &nomination{rec: &nominationRecord{Priority: 1000, Domain: "dom-a"}}
	for _, ns := range []string{"tenant-b", "tenant-a"} {
		victim := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "secret-0"}, Spec: v1.PodSpec{SchedulerName: topology.SchedulerName}}
		if ns == "tenant-a" {
			victim.Name = "mine-0"
		}
		if _, err := client.CoreV1().Pods(ns).Create(t.Context(), victim, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		client.ClearActions()
		refuse = false
		if err := e.evictVictim(t.Context(), a, nm, victim); err != nil {
			t.Fatal(err)
		}
		note := <-rec.Events
		var written []string
		for _, act := range client.Actions() {
			if p, ok := act.(k8stesting.PatchAction); ok {
				written = append(written, string(p.GetPatch()))
			}
		}
		if len(written) != 1 {
			t.Fatalf("%s: %d status patches, want the DisruptionTarget condition", ns, len(written))
		}
		leaks(t, ns, note)
		leaks(t, ns, written[0])
		if named := strings.Contains(note, "PodGroup tenant-a/prod"); named != (ns == "tenant-a") {
			t.Errorf("%s: event %q names the preemptor: %v, want %v", ns, note, named, ns == "tenant-a")
		}

		refuse = true
		err := e.evictVictim(t.Context(), a, nm, victim)
		if !errors.Is(err, errEvictionRefused) {
			t.Fatalf("%s: refused eviction: %v", ns, err)
		}
		leaks(t, "tenant-a", err.Error()) // reported on the preemptor (PreemptionBlocked)
	}
}
